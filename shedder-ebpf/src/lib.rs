// Empty on purpose: this target exists so shedder-daemon can name this crate
// as a build-dependency, which makes cargo rebuild the daemon (and re-embed
// the object) whenever the eBPF sources change. The program is src/main.rs.
#![no_std]
