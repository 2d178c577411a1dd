//! Any bytes as a rule file: a config or an error, never a panic; a loaded
//! config answers lookups.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slidegate_server::rules::{LoadOptions, RateLimitConfig};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let sources = [("fuzz.yaml".to_owned(), text.to_owned())];
    if let Ok(config) = RateLimitConfig::from_sources(&sources, LoadOptions::default()) {
        let domains: Vec<String> = config.domains().map(str::to_owned).collect();
        for domain in domains {
            let _ = config.lookup(&domain, &[("key", "value"), ("k2", "v2")]);
        }
    }
});
