//! Any text into the rate parser: an error or a rate, never a panic; a
//! parsed rate prints back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slidegate::Rate;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(rate) = text.parse::<Rate>() {
        let again: Rate = rate.to_string().parse().expect("Display parses back");
        assert_eq!(again, rate);
    }
    let _ = slidegate::rate::parse_window(text);
});
