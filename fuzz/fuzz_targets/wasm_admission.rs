//! WebAssembly module admission (`faas deploy`, `wasm:` functions):
//! `WasmFunction::new` compiles untrusted bytes (binary or WAT text),
//! checks the ABI and makes one instance under small limits (1 MiB of
//! memory, 1 ms). It refuses with a one-line reason or admits; an admitted
//! module is called once, and whatever it does (trap, loop, bad ranges,
//! memory growth) ends in a reply or an error, never a panic.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use peregrine_faas::wasm::{WasmFunction, WasmLimits};

fuzz_target!(|data: &[u8]| {
    let limits = WasmLimits::new(1 << 20, Duration::from_millis(1)).expect("limits in range");
    match WasmFunction::new("fuzz", data, limits) {
        Ok(f) => {
            let mut reply = Vec::new();
            if f.call(b"fuzzed request", &mut reply).is_err() {
                assert!(reply.len() <= 1 << 20);
            }
        }
        Err(why) => assert!(!why.contains('\n'), "one line: {why}"),
    }
});
