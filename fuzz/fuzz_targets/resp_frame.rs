//! Any bytes into the RESP command parser, with small bounds: an error, a
//! request for more bytes, or a command whose arguments lie inside what
//! it took, and what it took within the bounds; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use slidegate_server::api::resp::frame::{FrameLimits, parse};

fuzz_target!(|data: &[u8]| {
    let limits = FrameLimits {
        max_command_bytes: 256,
        max_args: 8,
    };
    let mut at = 0;
    while let Ok(Some(command)) = parse(&data[at..], limits) {
        assert!(command.len > 0 && at + command.len <= data.len());
        assert!(command.len <= limits.max_command_bytes);
        assert!(command.args.len() <= limits.max_args);
        for arg in &command.args {
            assert!(arg.start <= arg.end && arg.end <= command.len);
        }
        at += command.len;
    }
});
