//! Test frames (filled in by the packet-table work).
