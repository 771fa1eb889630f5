//! Where `HF_TOKEN` may go: to the endpoint's own origin (scheme, host and port) only, and
//! over https only, unless the endpoint itself is plain http on this machine (a local mirror,
//! the tests' fake hub). A listing's next page on another host, or a plain-http address, is
//! asked for without it; a redirect drops it on another host (reqwest's rule) and a redirect
//! from https to plain http is not followed ([`redirect_policy`]).

use reqwest::Url;

/// Whether a request to `url` carries the token of a client of `endpoint`.
pub fn token_goes_to(endpoint: &str, url: &str) -> bool {
    let (Ok(endpoint), Ok(url)) = (Url::parse(endpoint), Url::parse(url)) else {
        return false;
    };
    endpoint_takes_token(&endpoint) && same_origin(&endpoint, &url)
}

/// An endpoint the token is sent to at all: https, or plain http on loopback.
pub fn endpoint_takes_token(endpoint: &Url) -> bool {
    match endpoint.scheme() {
        "https" => true,
        "http" => is_loopback(endpoint),
        _ => false,
    }
}

fn same_origin(a: &Url, b: &Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

fn is_loopback(url: &Url) -> bool {
    match url.host_str() {
        Some("localhost") => true,
        Some(host) => host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

/// reqwest's default (at most 10 redirects), but never from https to plain http: a redirect
/// to the same host and port keeps the `Authorization` header, and plain http would carry it
/// in clear.
pub fn redirect_policy() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let downgrade = attempt.url().scheme() == "http"
            && attempt
                .previous()
                .last()
                .is_some_and(|from| from.scheme() == "https");
        if downgrade {
            let to = attempt.url().to_string();
            attempt.error(format!(
                "a redirect from https to plain http ({to}) is not followed"
            ))
        } else if attempt.previous().len() > 10 {
            attempt.error("more than 10 redirects")
        } else {
            attempt.follow()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_goes_only_to_the_endpoints_own_origin_over_https() {
        let hub = "https://huggingface.co";
        assert!(token_goes_to(
            hub,
            "https://huggingface.co/api/models/a/b/tree/main"
        ));
        assert!(token_goes_to(
            hub,
            "https://huggingface.co:443/a/b/resolve/main/x.gguf"
        ));
        // another host, a look-alike, another port, plain http to the same host
        assert!(!token_goes_to(
            hub,
            "https://evil.example/api/models/a/b/tree/main"
        ));
        assert!(!token_goes_to(hub, "https://huggingface.co.evil.example/x"));
        assert!(!token_goes_to(hub, "https://huggingface.co:8443/x"));
        assert!(!token_goes_to(hub, "http://huggingface.co/x"));
        assert!(!token_goes_to(hub, "not a url"));
    }

    #[test]
    fn a_plain_http_endpoint_gets_the_token_only_on_this_machine() {
        for local in [
            "http://127.0.0.1:8080",
            "http://localhost:8080",
            "http://[::1]:8080",
        ] {
            assert!(
                token_goes_to(local, &format!("{local}/api/models/a/b/tree/main")),
                "{local}"
            );
        }
        assert!(!token_goes_to(
            "http://127.0.0.1:8080",
            "http://127.0.0.1:9090/x"
        ));
        assert!(!token_goes_to(
            "http://mirror.example",
            "http://mirror.example/x"
        ));
        assert!(!token_goes_to("http://10.0.0.2", "http://10.0.0.2/x"));
    }
}
