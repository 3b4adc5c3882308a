// Header-only target; this file exists so SwiftPM builds the module.
