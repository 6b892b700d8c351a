//! Every TOML file the product reads, on untrusted text: the data plane's
//! declarations (router, network functions, chains: `peregrine chain
//! apply`) and the QoS rules and scheduler file (`peregrine qos apply`,
//! `qos serve`). A parser refuses with an error or accepts; it never
//! panics, and whatever it accepts it accepts again (parsing is pure).
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_dataplane::DataplaneConfig;
use peregrine_qos::PolicerConfig;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(d) = DataplaneConfig::from_toml(text) {
        let again = DataplaneConfig::from_toml(text).expect("accepted once, accepted again");
        assert_eq!(d, again);
    }
    if let Ok(q) = PolicerConfig::parse(text) {
        assert_eq!(PolicerConfig::parse(text).expect("accepted again"), q);
    }
});
