//! `--dial-prefix-map FROM_CIDR=TO_CIDR` (development and tests only): rewrites the address the
//! resolver dials, keeping the host bits, so that tests reach "the pod" on a loopback address
//! (docs/resolver.md). `10.0.0.0/8=127.0.0.0/8` sends
//! `10.244.1.5:8080` to `127.244.1.5:8080`.
//!
//! While a map is set, an address that no rule covers is not dialed at all: a development
//! resolver never sends traffic to an address its map does not name.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use ipnet::IpNet;

/// One `FROM_CIDR=TO_CIDR` rule: both networks of the same family and prefix length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrefixRule {
    from: IpNet,
    to: IpNet,
}

impl FromStr for PrefixRule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (from, to) = s.split_once('=').ok_or_else(|| {
            format!("`{s}` is not FROM_CIDR=TO_CIDR (e.g. 10.0.0.0/8=127.0.0.0/8)")
        })?;
        let net = |part: &str| {
            part.trim()
                .parse::<IpNet>()
                .map(|n| n.trunc())
                .map_err(|e| format!("`{part}` in `{s}` is not a CIDR: {e}"))
        };
        let (from, to) = (net(from)?, net(to)?);
        if from.prefix_len() != to.prefix_len() || from.addr().is_ipv4() != to.addr().is_ipv4() {
            return Err(format!(
                "`{s}`: both sides must be networks of the same family and prefix length"
            ));
        }
        Ok(Self { from, to })
    }
}

impl PrefixRule {
    fn apply(&self, ip: IpAddr) -> Option<IpAddr> {
        if !self.from.contains(&ip) {
            return None;
        }
        Some(match (ip, self.to.network(), self.to.hostmask()) {
            (IpAddr::V4(ip), IpAddr::V4(net), IpAddr::V4(host)) => {
                IpAddr::V4((u32::from(net) | (u32::from(ip) & u32::from(host))).into())
            }
            (IpAddr::V6(ip), IpAddr::V6(net), IpAddr::V6(host)) => {
                IpAddr::V6((u128::from(net) | (u128::from(ip) & u128::from(host))).into())
            }
            _ => return None,
        })
    }
}

/// The rules of `--dial-prefix-map`, first match wins; empty in production (addresses are
/// dialed as they are).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PrefixMap {
    rules: Vec<PrefixRule>,
}

/// An endpoint address that no rule of a non-empty map covers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0} is not covered by --dial-prefix-map, so it is not dialed")]
pub(crate) struct NotCovered(pub SocketAddr);

impl PrefixMap {
    /// A map of `rules`.
    pub fn new(rules: Vec<PrefixRule>) -> Self {
        Self { rules }
    }

    /// Whether no rule is set.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The address to dial for endpoint `addr`.
    ///
    /// # Errors
    /// [`NotCovered`] when the map is not empty and no rule covers `addr`.
    pub(crate) fn dial_addr(&self, addr: SocketAddr) -> Result<SocketAddr, NotCovered> {
        if self.rules.is_empty() {
            return Ok(addr);
        }
        self.rules
            .iter()
            .find_map(|r| r.apply(addr.ip()))
            .map(|ip| SocketAddr::new(ip, addr.port()))
            .ok_or(NotCovered(addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(rules: &[&str]) -> PrefixMap {
        PrefixMap::new(rules.iter().map(|r| r.parse().unwrap()).collect())
    }

    fn dial(m: &PrefixMap, addr: &str) -> Result<String, NotCovered> {
        m.dial_addr(addr.parse().unwrap()).map(|a| a.to_string())
    }

    #[test]
    fn keeps_host_bits_and_the_port() {
        let m = map(&["10.0.0.0/8=127.0.0.0/8"]);
        assert_eq!(dial(&m, "10.244.1.5:8080").unwrap(), "127.244.1.5:8080");
        assert_eq!(dial(&m, "10.0.0.0:1").unwrap(), "127.0.0.0:1");
        let narrow = map(&["10.244.0.0/16=127.1.0.0/16", "fd00::/64=::/64"]);
        assert_eq!(dial(&narrow, "10.244.3.4:80").unwrap(), "127.1.3.4:80");
        assert_eq!(dial(&narrow, "[fd00::1]:80").unwrap(), "[::1]:80");
    }

    #[test]
    fn a_set_map_refuses_what_it_does_not_cover_and_an_empty_one_changes_nothing() {
        let m = map(&["10.0.0.0/8=127.0.0.0/8"]);
        assert_eq!(
            dial(&m, "192.168.1.1:80"),
            Err(NotCovered("192.168.1.1:80".parse().unwrap()))
        );
        assert_eq!(
            dial(&PrefixMap::default(), "10.1.2.3:80").unwrap(),
            "10.1.2.3:80"
        );
    }

    #[test]
    fn rejects_malformed_rules() {
        for bad in [
            "10.0.0.0/8",
            "10.0.0.0/8=127.0.0.0/16",
            "10.0.0.0/8=::/8",
            "ten=127.0.0.0/8",
        ] {
            assert!(bad.parse::<PrefixRule>().is_err(), "{bad}");
        }
        // Host bits in a CIDR are ignored, as `ip route` does.
        let m = map(&["10.1.2.3/8=127.0.0.1/8"]);
        assert_eq!(dial(&m, "10.9.9.9:1").unwrap(), "127.9.9.9:1");
    }
}
