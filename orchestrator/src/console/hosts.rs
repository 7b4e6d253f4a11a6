//! Which `Host` the console answers to, and which other origins may retry.
//!
//! Why: the console listens on localhost and its usual client is a browser
//! on the same machine. A web page anywhere can point a DNS name of its own
//! at 127.0.0.1 (DNS rebinding): the browser then sends that name as `Host`
//! and treats the console as the page's own origin — the page could read
//! every saga and, with no admin token configured, retry failed ones. So a
//! name the console was not told about is refused. It answers to IP
//! addresses (no DNS is involved), to `localhost` and `*.localhost`, and to
//! the names given with `--console-allowed-host` (a proxy's public name). A
//! request without `Host` (HTTP/1.0) does not come from a browser.
//!
//! The configured names are also the origins whose pages may retry besides
//! the console's own (behind a proxy the browser's `Origin` is the public
//! name while `Host` may be the upstream address).

use std::net::IpAddr;

/// The host names the console answers to besides IP addresses and
/// localhost; lowercase, without ports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AllowedHosts {
    names: Vec<String>,
}

impl AllowedHosts {
    /// IP addresses, localhost and `names` (any case, with or without a
    /// port: the port is ignored).
    pub fn new<S: AsRef<str>>(names: impl IntoIterator<Item = S>) -> Self {
        let names = names
            .into_iter()
            .map(|n| host_name(n.as_ref()))
            .filter(|n| !n.is_empty())
            .collect();
        AllowedHosts { names }
    }

    /// Whether a request whose `Host` (or HTTP/2 authority) is `host` may
    /// be answered.
    pub fn admits_host(&self, host: &str) -> bool {
        let name = host_name(host);
        name.parse::<IpAddr>().is_ok()
            || name == "localhost"
            || name.ends_with(".localhost")
            || self.names.contains(&name)
    }

    /// Whether a page at `origin_authority` (an `Origin` without its
    /// scheme) other than the console's own may retry: one of the
    /// configured names.
    pub fn admits_origin(&self, origin_authority: &str) -> bool {
        self.names.contains(&host_name(origin_authority))
    }
}

/// The name part of a `Host` value: lowercase, without the port, without
/// the brackets of an IPv6 address or a final dot.
fn host_name(host: &str) -> String {
    let host = host.trim().to_ascii_lowercase();
    let name = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split(']').next().unwrap_or_default(),
        None => match host.rsplit_once(':') {
            Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
            _ => host.as_str(),
        },
    };
    name.trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_addresses_localhost_and_configured_names_are_answered_other_names_not() {
        let hosts = AllowedHosts::new(["Console.Example.com:443"]);
        for admitted in [
            "127.0.0.1:8080",
            "10.1.2.3",
            "[::1]:8080",
            "[fe80::1]",
            "localhost:8080",
            "LOCALHOST",
            "localhost.",
            "app.localhost:3000",
            "console.example.com",
            "console.example.com:8443",
        ] {
            assert!(hosts.admits_host(admitted), "{admitted}");
        }
        for refused in [
            "evil.example:8080",
            "127.0.0.1.evil.example",
            "localhost.evil.example",
            "example.com",
            "",
        ] {
            assert!(!hosts.admits_host(refused), "{refused}");
        }
        assert!(hosts.admits_origin("console.example.com"));
        assert!(
            !hosts.admits_origin("localhost:8080"),
            "only configured names"
        );
        assert!(!AllowedHosts::default().admits_origin("console.example.com"));
    }
}
