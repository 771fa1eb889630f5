//! How much of a hub's answer is read, and for how long: every response read into memory
//! (a listing's pages, a GGUF header's prefix) stops at a size and a deadline, and a listing
//! at a number of pages and at a page it has read before. A hub is a server on the network,
//! and the window's panel reads it inside the process that serves agents: an endless or a
//! trickling answer ends with an error that names the bound, not with the memory or a hang.

use std::time::Duration;

/// The most bytes of one repository's listing read, all pages together. The hub lists a
/// file in about 300 bytes: 16 MiB is some 50,000 files, far past any model repository.
pub const LISTING_BYTES_MAX: u64 = 16 << 20;
/// The most pages of one listing followed (the hub's pages hold up to 1,000 entries).
pub const LISTING_PAGES_MAX: u32 = 100;
/// The longest one listing, all pages together, may take.
pub const LISTING_DEADLINE_SECS: u64 = 60;
/// The most bytes of a remote GGUF read for its header (the last of the prefixes asked
/// for; a large vocabulary's header is a few MB).
pub const HEADER_BYTES_MAX: u64 = 128 << 20;
/// The longest the reading of one remote header, all its requests together, may take.
pub const HEADER_DEADLINE_SECS: u64 = 120;

/// The bounds a [`super::HubClient`] reads under: the constants above unless a test sets
/// others ([`super::HubClient::with_bounds`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HubBounds {
    pub listing_bytes_max: u64,
    pub listing_pages_max: u32,
    pub listing_deadline: Duration,
    pub header_bytes_max: u64,
    pub header_deadline: Duration,
}

impl Default for HubBounds {
    fn default() -> Self {
        Self {
            listing_bytes_max: LISTING_BYTES_MAX,
            listing_pages_max: LISTING_PAGES_MAX,
            listing_deadline: Duration::from_secs(LISTING_DEADLINE_SECS),
            header_bytes_max: HEADER_BYTES_MAX,
            header_deadline: Duration::from_secs(HEADER_DEADLINE_SECS),
        }
    }
}

/// A bound that stopped a read, in words with its value and its name:
/// "passed 16 MiB (LISTING_BYTES_MAX)".
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Hit {
    Bytes {
        name: &'static str,
        max: u64,
    },
    Pages {
        name: &'static str,
        max: u32,
    },
    Deadline {
        name: &'static str,
        after: Duration,
    },
    /// A listing's next page is one it has read already.
    Loop {
        url: String,
    },
}

impl std::fmt::Display for Hit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Bytes { name, max } => write!(f, "passed {} ({name})", size_words(*max)),
            Self::Pages { name, max } => write!(f, "passed {max} pages ({name})"),
            Self::Deadline { name, after } => {
                write!(f, "took longer than {} s ({name})", after.as_secs_f64())
            }
            Self::Loop { url } => write!(f, "names {url} as its next page a second time (a loop)"),
        }
    }
}

/// "16 MiB", "64 KiB", or "1000 bytes" when it is neither.
fn size_words(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} bytes"),
    }
}

/// Why [`read_body`] stopped short of the body's end.
pub(super) enum Stopped {
    /// The body (or its announced length) is longer than the bytes left to read.
    TooLong,
    Network(reqwest::Error),
}

/// A response's whole body, read a chunk at a time, or [`Stopped::TooLong`] as soon as it
/// passes `max_bytes` (at once when its `Content-Length` says it will): no more than the
/// bound and one chunk is ever held.
pub(super) async fn read_body(
    response: &mut reqwest::Response,
    max_bytes: u64,
) -> Result<Vec<u8>, Stopped> {
    if response.content_length().is_some_and(|n| n > max_bytes) {
        return Err(Stopped::TooLong);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(Stopped::Network)? {
        if (body.len() + chunk.len()) as u64 > max_bytes {
            return Err(Stopped::TooLong);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_is_named_with_its_value() {
        let bytes = Hit::Bytes {
            name: "LISTING_BYTES_MAX",
            max: LISTING_BYTES_MAX,
        };
        assert_eq!(bytes.to_string(), "passed 16 MiB (LISTING_BYTES_MAX)");
        let deadline = Hit::Deadline {
            name: "LISTING_DEADLINE_SECS",
            after: Duration::from_millis(1500),
        };
        assert_eq!(
            deadline.to_string(),
            "took longer than 1.5 s (LISTING_DEADLINE_SECS)"
        );
        assert_eq!(size_words(HEADER_BYTES_MAX), "128 MiB");
        assert_eq!(size_words(64 << 10), "64 KiB");
        assert_eq!(size_words(1000), "1000 bytes");
    }
}
