#!/usr/bin/python3
"""A stand-in for BlueZ's org.bluez on a private bus, for BLEDiscoveryTests.

Independent of BigPeer's D-Bus code (python3-dbus, i.e. libdbus): it does what bluetoothd does
with what a client registers (reads the advertisement's properties back with GetAll, the GATT
application with GetManagedObjects, every characteristic with ReadValue) and records it all for
the test to query through org.bigpeer.FakeBlueZ.Report (a JSON string).
Usage: DBUS_SYSTEM_BUS_ADDRESS=... fake_bluez.py  (prints "ready" once it owns org.bluez)
"""
import json
import sys

import dbus
import dbus.service
import dbus.mainloop.glib
from gi.repository import GLib

dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
bus = dbus.bus.BusConnection(sys.argv[1]) if len(sys.argv) > 1 else dbus.SystemBus()

ADAPTER = "/org/bluez/hci0"
report = {"advertisements": {}, "unregistered_advertisements": [], "applications": {}, "unregistered_applications": [],
          "discovery_filter": None, "discovering": False, "errors": []}
legacy_only = {"on": False}
devices = {}
hung = []


def plain(v):
    if isinstance(v, dbus.Array) and v.signature == "y":
        return [int(b) for b in v]
    if isinstance(v, (dbus.Array, list)):
        return [plain(x) for x in v]
    if isinstance(v, (dbus.Dictionary, dict)):
        return {str(k): plain(x) for k, x in v.items()}
    if isinstance(v, dbus.Boolean):
        return bool(v)
    if isinstance(v, (dbus.Byte, dbus.Int16, dbus.UInt16, dbus.Int32, dbus.UInt32, dbus.Int64, dbus.UInt64)):
        return int(v)
    if isinstance(v, dbus.Struct):
        return [plain(x) for x in v]
    return str(v)


class Adapter(dbus.service.Object):
    @dbus.service.method("org.bluez.LEAdvertisingManager1", in_signature="oa{sv}", out_signature="",
                         sender_keyword="sender", async_callbacks=("ok", "err"))
    def RegisterAdvertisement(self, path, options, sender=None, ok=None, err=None):
        obj = bus.get_object(sender, path, introspect=False)

        def got(props):
            p = plain(props)
            if legacy_only["on"] and "ServiceUUIDs" in p and "ServiceData" in p:
                err(dbus.exceptions.DBusException("Advertising data too long", name="org.bluez.Error.InvalidLength"))
                return
            report["advertisements"][str(path)] = p
            ok()

        def failed(e):
            report["errors"].append("GetAll: %s" % e)
            err(dbus.exceptions.DBusException(str(e), name="org.bluez.Error.Failed"))

        obj.GetAll("org.bluez.LEAdvertisement1", dbus_interface="org.freedesktop.DBus.Properties",
                   reply_handler=got, error_handler=failed)

    @dbus.service.method("org.bluez.LEAdvertisingManager1", in_signature="o", out_signature="")
    def UnregisterAdvertisement(self, path):
        if str(path) not in report["advertisements"]:
            raise dbus.exceptions.DBusException("not registered", name="org.bluez.Error.DoesNotExist")
        report["unregistered_advertisements"].append(str(path))
        del report["advertisements"][str(path)]

    @dbus.service.method("org.bluez.GattManager1", in_signature="oa{sv}", out_signature="",
                         sender_keyword="sender", async_callbacks=("ok", "err"))
    def RegisterApplication(self, path, options, sender=None, ok=None, err=None):
        root = bus.get_object(sender, path, introspect=False)

        def failed(e):
            report["errors"].append("RegisterApplication: %s" % e)
            err(dbus.exceptions.DBusException(str(e), name="org.bluez.Error.Failed"))

        def got(objects):
            app = {"objects": plain(objects), "reads": {}}
            chars = [p for p, ifaces in objects.items() if "org.bluez.GattCharacteristic1" in ifaces]
            if not chars:
                report["applications"][str(path)] = app
                ok()
                return

            def read_next(i):
                if i == len(chars):
                    report["applications"][str(path)] = app
                    ok()
                    return
                c = bus.get_object(sender, chars[i], introspect=False)

                def value(v):
                    app["reads"][str(chars[i])] = [int(b) for b in v]
                    read_next(i + 1)

                c.ReadValue(dbus.Dictionary({}, signature="sv"), dbus_interface="org.bluez.GattCharacteristic1",
                            reply_handler=value, error_handler=failed)

            read_next(0)

        root.GetManagedObjects(dbus_interface="org.freedesktop.DBus.ObjectManager", reply_handler=got, error_handler=failed)

    @dbus.service.method("org.bluez.GattManager1", in_signature="o", out_signature="")
    def UnregisterApplication(self, path):
        if str(path) not in report["applications"]:
            raise dbus.exceptions.DBusException("not registered", name="org.bluez.Error.DoesNotExist")
        report["unregistered_applications"].append(str(path))
        del report["applications"][str(path)]

    @dbus.service.method("org.bluez.Adapter1", in_signature="a{sv}", out_signature="")
    def SetDiscoveryFilter(self, f):
        report["discovery_filter"] = plain(f)

    @dbus.service.method("org.bluez.Adapter1", in_signature="", out_signature="")
    def StartDiscovery(self):
        report["discovering"] = True

    @dbus.service.method("org.bluez.Adapter1", in_signature="", out_signature="")
    def StopDiscovery(self):
        report["discovering"] = False


class Root(dbus.service.Object):
    @dbus.service.method("org.freedesktop.DBus.ObjectManager", in_signature="", out_signature="a{oa{sa{sv}}}")
    def GetManagedObjects(self):
        out = {dbus.ObjectPath(ADAPTER): {"org.bluez.Adapter1": {"Address": "00:11:22:33:44:55"}}}
        for path, props in devices.items():
            out[dbus.ObjectPath(path)] = {"org.bluez.Device1": props}
        return out

    @dbus.service.signal("org.freedesktop.DBus.ObjectManager", signature="oa{sa{sv}}")
    def InterfacesAdded(self, path, interfaces):
        pass

    @dbus.service.signal("org.freedesktop.DBus.ObjectManager", signature="oas")
    def InterfacesRemoved(self, path, interfaces):
        pass


class Control(dbus.service.Object):
    @dbus.service.method("org.bigpeer.FakeBlueZ", in_signature="", out_signature="s")
    def Report(self):
        return json.dumps(report, sort_keys=True)

    @dbus.service.method("org.bigpeer.FakeBlueZ", in_signature="", out_signature="", async_callbacks=("ok", "err"))
    def Hang(self, ok=None, err=None):
        hung.append((ok, err))
        report["hung"] = len(hung)

    @dbus.service.method("org.bigpeer.FakeBlueZ", in_signature="b", out_signature="")
    def SetLegacyOnly(self, on):
        legacy_only["on"] = bool(on)

    @dbus.service.method("org.bigpeer.FakeBlueZ", in_signature="ssssay", out_signature="")
    def AddDevice(self, path, address, address_type, uuid, data):
        self.AddNamedDevice(path, address, address_type, "node", uuid, data)

    @dbus.service.method("org.bigpeer.FakeBlueZ", in_signature="sssssay", out_signature="")
    def AddNamedDevice(self, path, address, address_type, name, uuid, data):
        props = dbus.Dictionary({"Address": dbus.String(address), "AddressType": dbus.String(address_type), "Name": dbus.String(name),
                                 "ServiceData": dbus.Dictionary({uuid: dbus.Array([dbus.Byte(b) for b in data], signature="y")},
                                                                signature="sv")}, signature="sv")
        if len(data) == 0:
            del props["ServiceData"]
        devices[str(path)] = props
        root.InterfacesAdded(dbus.ObjectPath(path), dbus.Dictionary({"org.bluez.Device1": props}, signature="sa{sv}"))

    @dbus.service.method("org.bigpeer.FakeBlueZ", in_signature="s", out_signature="")
    def RemoveDevice(self, path):
        devices.pop(str(path), None)
        root.InterfacesRemoved(dbus.ObjectPath(path), dbus.Array(["org.bluez.Device1"], signature="s"))


name = dbus.service.BusName("org.bluez", bus)
adapter = Adapter(bus, ADAPTER)
root = Root(bus, "/")
control = Control(bus, "/org/bigpeer/fake")
print("ready", flush=True)
GLib.MainLoop().run()
