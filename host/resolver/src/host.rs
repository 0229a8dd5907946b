//! Finding the target of a request from its Host (docs/resolver.md; as
//! KubeElasti's host manager).
//!
//! Accepted forms, each with an optional `:port`: `svc.ns.svc.<cluster domain>` (e.g.
//! `svc.ns.svc.cluster.local`), `svc.ns.svc` and `svc.ns`. Istio's
//! `X-Envoy-Decorator-Operation` form `svc.ns.svc.cluster.local:80/*` is accepted too (the
//! part from the first `/` is ignored). A bare `svc` is refused: the namespace cannot be
//! guessed.

use std::fmt;

/// The public Service a request is for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    /// Namespace of the Service.
    pub namespace: String,
    /// Name of the public Service.
    pub service: String,
    /// The port of the Host, if it named one; `None` means 80, or the Service's only port.
    pub port: Option<u16>,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.service, self.namespace)?;
        if let Some(port) = self.port {
            write!(f, ":{port}")?;
        }
        Ok(())
    }
}

/// Why a Host names no Service. The messages are the bodies of the 400 answers.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HostError {
    /// Neither the configured header, `Host` nor the request URI carry a host.
    #[error(
        "the request has no Host: the resolver finds the target Service from the Host header (or the header set by --host-header), e.g. web.shop.svc.cluster.local"
    )]
    Missing,
    /// A bare Service name (upstream answered 500 "Error getting host").
    #[error(
        "the Host `{0}` names no namespace: use <service>.<namespace>[.svc[.cluster.local]][:port], e.g. {0}.default.svc.cluster.local"
    )]
    BareService(String),
    /// Anything else that is not a Service host (an IP address, a foreign domain, bad labels).
    #[error(
        "the Host `{0}` is not a Service host: use <service>.<namespace>[.svc[.cluster.local]][:port]"
    )]
    NotAServiceHost(String),
    /// The port is not a number from 1 to 65535.
    #[error("the Host `{0}` has an invalid port")]
    BadPort(String),
}

/// A parsed Host: the target and the authority the request is forwarded with
/// (`host[:port]`, lower case, without a trailing dot or a `/…` suffix).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ParsedHost {
    /// The Service.
    pub target: Target,
    /// The normalised authority, which [`parse_host`] maps back to the same target.
    pub authority: String,
}

/// Parses a Host value into the Service it names.
///
/// # Errors
/// [`HostError`] with a message that tells the client the accepted forms.
pub(crate) fn parse_host(raw: &str) -> Result<ParsedHost, HostError> {
    let raw = raw.trim();
    let raw = raw.split_once('/').map_or(raw, |(head, _)| head);
    if raw.is_empty() {
        return Err(HostError::Missing);
    }
    if raw.starts_with('[') {
        return Err(HostError::NotAServiceHost(raw.into()));
    }
    let (name, port) = match raw.rsplit_once(':') {
        Some((name, port)) => {
            let port = port
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0 && port.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| HostError::BadPort(raw.into()))?;
            (name, Some(port))
        }
        None => (raw, None),
    };
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let labels: Vec<&str> = name.split('.').collect();
    if !labels.iter().all(|l| is_dns_label(l)) {
        return Err(HostError::NotAServiceHost(raw.into()));
    }
    let (service, namespace) = match labels.as_slice() {
        [service] => return Err(HostError::BareService((*service).into())),
        [service, namespace] => (*service, *namespace),
        [service, namespace, "svc", ..] => (*service, *namespace),
        _ => return Err(HostError::NotAServiceHost(raw.into())),
    };
    // Service names are DNS-1035 labels: they start with a letter (so IPs never match).
    if !service.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err(HostError::NotAServiceHost(raw.into()));
    }
    let authority = match port {
        Some(p) => format!("{name}:{p}"),
        None => name.clone(),
    };
    Ok(ParsedHost {
        target: Target {
            namespace: namespace.into(),
            service: service.into(),
            port,
        },
        authority,
    })
}

/// A DNS-1123 label: 1 to 63 of `[a-z0-9-]`, not starting or ending with `-`.
fn is_dns_label(label: &str) -> bool {
    (1..=63).contains(&label.len())
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(raw: &str) -> Result<(String, String, Option<u16>), HostError> {
        parse_host(raw).map(|p| (p.target.service, p.target.namespace, p.target.port))
    }

    #[test]
    fn accepts_every_service_form_of_the_contract() {
        let web = |port| Ok(("web".to_owned(), "shop".to_owned(), port));
        assert_eq!(target("web.shop.svc.cluster.local"), web(None));
        assert_eq!(target("web.shop.svc.cluster.local:8080"), web(Some(8080)));
        assert_eq!(target("web.shop.svc"), web(None));
        assert_eq!(target("web.shop.svc:81"), web(Some(81)));
        assert_eq!(target("web.shop"), web(None));
        assert_eq!(target("web.shop:80"), web(Some(80)));
        // Istio's X-Envoy-Decorator-Operation, a trailing dot, upper case, a custom domain.
        assert_eq!(target("web.shop.svc.cluster.local:80/*"), web(Some(80)));
        assert_eq!(target("web.shop.svc.cluster.local."), web(None));
        assert_eq!(target("WEB.Shop.svc.cluster.local"), web(None));
        assert_eq!(target("web.shop.svc.corp.example"), web(None));
        assert_eq!(target(" web.shop "), web(None));
    }

    #[test]
    fn the_authority_maps_back_to_the_same_target() {
        for raw in [
            "WEB.shop.svc.cluster.local.:8080/*",
            "web.shop",
            "web.shop.svc:81",
        ] {
            let parsed = parse_host(raw).unwrap();
            let again = parse_host(&parsed.authority).unwrap();
            assert_eq!(again.target, parsed.target);
            assert_eq!(again.authority, parsed.authority);
        }
        assert_eq!(
            parse_host("WEB.shop.svc.cluster.local.:8080/*")
                .unwrap()
                .authority,
            "web.shop.svc.cluster.local:8080"
        );
    }

    #[test]
    fn refuses_what_names_no_service_with_a_message_that_helps() {
        assert_eq!(target(""), Err(HostError::Missing));
        assert_eq!(target("/*"), Err(HostError::Missing));
        let bare = target("web").unwrap_err();
        assert_eq!(bare, HostError::BareService("web".into()));
        assert!(
            bare.to_string().contains("web.default.svc.cluster.local"),
            "{bare}"
        );
        assert_eq!(target("web:80"), Err(HostError::BareService("web".into())));
        for raw in [
            "10.96.0.10",
            "10.96.0.10:80",
            "[::1]:80",
            "web.shop.example.com",
            "web..svc",
            "-web.shop",
            "web_1.shop",
            "1web.shop",
        ] {
            assert!(
                matches!(target(raw), Err(HostError::NotAServiceHost(_))),
                "{raw}: {:?}",
                target(raw)
            );
        }
        for raw in [
            "web.shop:",
            "web.shop:0",
            "web.shop:65536",
            "web.shop:+80",
            "web.shop:http",
        ] {
            assert_eq!(target(raw), Err(HostError::BadPort(raw.into())), "{raw}");
        }
    }

    #[test]
    fn displays_as_service_dot_namespace() {
        let t = parse_host("web.shop.svc:81").unwrap().target;
        assert_eq!(t.to_string(), "web.shop:81");
    }
}
