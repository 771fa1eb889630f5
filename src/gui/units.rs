//! The window's one way to write each quantity: sizes in binary units (MiB, GiB), rates in
//! tok/s, seconds in s; a number and its unit are joined by a non-breaking space, so a wrapped
//! line never leaves a unit alone at the start of the next.

/// The space between a number and its unit: egui does not break a line there.
pub const NBSP: char = '\u{a0}';

const MIB: f64 = (1u64 << 20) as f64;
const GIB: f64 = (1u64 << 30) as f64;

/// A size in bytes: "86.4 MiB", "17.3 GiB" (binary units everywhere in the window).
pub fn bytes_words(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= GIB {
        format!("{:.1}{NBSP}GiB", b / GIB)
    } else {
        format!("{:.1}{NBSP}MiB", b / MIB)
    }
}

/// A decode rate: "8.0 tok/s".
pub fn rate_words(tokens_per_sec: f64) -> String {
    format!("{tokens_per_sec:.1}{NBSP}tok/s")
}

/// Seconds with one decimal: "34.8 s".
pub fn secs_words(secs: f64) -> String {
    format!("{secs:.1}{NBSP}s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_in_mebibytes_or_gibibytes_with_the_unit_kept_to_its_number() {
        assert_eq!(bytes_words(90_596_352), "86.4\u{a0}MiB");
        assert_eq!(bytes_words(18_575_000_000), "17.3\u{a0}GiB");
    }

    #[test]
    fn rates_are_tokens_per_second_and_times_seconds() {
        assert_eq!(rate_words(8.04), "8.0\u{a0}tok/s");
        assert_eq!(secs_words(34.81), "34.8\u{a0}s");
    }
}
