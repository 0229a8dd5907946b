//! `probeResponse` rules: answers the resolver gives itself while a service is at zero, such as
//! load-balancer health checks, so that they neither wake the service nor wait (as KubeElasti,
//! docs/resolver.md).
//!
//! Matching follows Gateway API's `HTTPRouteMatch`: every condition of a rule must hold and the
//! first matching rule wins. `PathPrefix` matches whole path segments (`/health` matches
//! `/health` and `/health/live`, not `/healthz`); `Exact` the whole path;
//! `RegularExpression` (path, header or query value) must match the whole value. Header names
//! compare case-insensitively, methods too. A HEAD request gets the status without the body.

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, Uri};
use regex::Regex;

use wasmop_api::elasticservice::{ProbeMatch, ProbeResponse, ValueMatch};

/// The compiled `probeResponse` rules of one ElasticService.
#[derive(Debug, Default)]
pub struct ProbeRules {
    rules: Vec<Rule>,
}

#[derive(Debug)]
struct Rule {
    path: PathCond,
    headers: Vec<(http::HeaderName, ValueCond)>,
    query: Vec<(String, ValueCond)>,
    method: Option<String>,
    status: StatusCode,
    body: Bytes,
}

#[derive(Debug)]
enum PathCond {
    Prefix(String),
    Exact(String),
    Regex(Regex),
}

#[derive(Debug)]
enum ValueCond {
    Exact(String),
    Regex(Regex),
}

impl ValueCond {
    fn new(m: &ValueMatch) -> Result<Self, String> {
        match m.type_.as_str() {
            "RegularExpression" => Ok(Self::Regex(anchored(&m.value)?)),
            "Exact" => Ok(Self::Exact(m.value.clone())),
            other => Err(format!("unknown match type `{other}` for `{}`", m.name)),
        }
    }

    fn matches(&self, value: &str) -> bool {
        match self {
            Self::Exact(v) => v == value,
            Self::Regex(r) => r.is_match(value),
        }
    }
}

/// `^(?:pattern)$`, so that the pattern must match the whole value.
fn anchored(pattern: &str) -> Result<Regex, String> {
    Regex::new(&format!("^(?:{pattern})$")).map_err(|e| format!("invalid regular expression: {e}"))
}

impl Rule {
    fn new(spec: &ProbeResponse) -> Result<Self, String> {
        let m: &ProbeMatch = &spec.match_;
        let path = match &m.path {
            None => PathCond::Prefix("/".into()),
            Some(p) => match p.type_.as_str() {
                "PathPrefix" => {
                    let trimmed = p.value.trim_end_matches('/');
                    PathCond::Prefix(if trimmed.is_empty() {
                        "/".into()
                    } else {
                        trimmed.into()
                    })
                }
                "Exact" => PathCond::Exact(p.value.clone()),
                "RegularExpression" => PathCond::Regex(anchored(&p.value)?),
                other => return Err(format!("unknown path match type `{other}`")),
            },
        };
        let headers = m
            .headers
            .iter()
            .map(|h| {
                let name = http::HeaderName::from_bytes(h.name.as_bytes())
                    .map_err(|_| format!("invalid header name `{}`", h.name))?;
                Ok((name, ValueCond::new(h)?))
            })
            .collect::<Result<_, String>>()?;
        let query = m
            .query_params
            .iter()
            .map(|q| Ok((q.name.clone(), ValueCond::new(q)?)))
            .collect::<Result<_, String>>()?;
        let status = StatusCode::from_u16(spec.response.status)
            .map_err(|_| format!("invalid status {}", spec.response.status))?;
        Ok(Self {
            path,
            headers,
            query,
            method: m.method.clone(),
            status,
            body: Bytes::from(spec.response.body.clone()),
        })
    }

    fn matches(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> bool {
        let path = uri.path();
        let path_ok = match &self.path {
            PathCond::Prefix(p) if p == "/" => true,
            PathCond::Prefix(p) => path
                .strip_prefix(p.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/')),
            PathCond::Exact(p) => path == p,
            PathCond::Regex(r) => r.is_match(path),
        };
        path_ok
            && self
                .method
                .as_deref()
                .is_none_or(|m| m.eq_ignore_ascii_case(method.as_str()))
            && self.headers.iter().all(|(name, cond)| {
                headers
                    .get_all(name)
                    .iter()
                    .any(|v| v.to_str().is_ok_and(|v| cond.matches(v)))
            })
            && self.query.iter().all(|(name, cond)| {
                form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
                    .any(|(k, v)| k == name.as_str() && cond.matches(&v))
            })
    }
}

impl ProbeRules {
    /// Compiles `specs`. A rule that cannot be compiled (an invalid regular expression or
    /// header name) is left out and described in the returned errors, as `probeResponse[i]:
    /// why`; the other rules still apply.
    pub fn compile(specs: &[ProbeResponse]) -> (Self, Vec<String>) {
        let mut rules = Vec::with_capacity(specs.len());
        let mut errors = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            match Rule::new(spec) {
                Ok(rule) => rules.push(rule),
                Err(e) => errors.push(format!("probeResponse[{i}]: {e}")),
            }
        }
        (Self { rules }, errors)
    }

    /// The answer of the first rule the request matches: its status and body (empty for HEAD).
    pub fn answer(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Option<(StatusCode, Bytes)> {
        let rule = self
            .rules
            .iter()
            .find(|r| r.matches(method, uri, headers))?;
        let body = if method == Method::HEAD {
            Bytes::new()
        } else {
            rule.body.clone()
        };
        Some((rule.status, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(yaml: &str) -> ProbeRules {
        let specs: Vec<ProbeResponse> = serde_yaml::from_str(yaml).unwrap();
        let (rules, errors) = ProbeRules::compile(&specs);
        assert!(errors.is_empty(), "{errors:?}");
        rules
    }

    fn ask(
        rules: &ProbeRules,
        method: &str,
        uri: &str,
        headers: &[(&str, &str)],
    ) -> Option<(u16, String)> {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        rules
            .answer(&method.parse().unwrap(), &uri.parse().unwrap(), &map)
            .map(|(s, b)| (s.as_u16(), String::from_utf8(b.to_vec()).unwrap()))
    }

    #[test]
    fn path_prefix_matches_whole_segments_and_defaults_to_everything() {
        let r = rules("- match: {path: {value: /health/}}\n  response: {status: 200, body: up}\n");
        assert_eq!(ask(&r, "GET", "/health", &[]), Some((200, "up".into())));
        assert_eq!(
            ask(&r, "GET", "/health/live?x=1", &[]),
            Some((200, "up".into()))
        );
        assert_eq!(ask(&r, "GET", "/healthz", &[]), None);
        assert_eq!(ask(&r, "GET", "/", &[]), None);
        let all = rules("- response: {status: 204}\n");
        assert_eq!(
            ask(&all, "POST", "/anything", &[]),
            Some((204, String::new()))
        );
    }

    #[test]
    fn exact_and_regex_paths() {
        let r = rules(
            "- match: {path: {type: Exact, value: /ping}}\n  response: {status: 200, body: pong}\n\
             - match: {path: {type: RegularExpression, value: '/v[0-9]+/ready'}}\n  response: {status: 200, body: ready}\n",
        );
        assert_eq!(ask(&r, "GET", "/ping", &[]), Some((200, "pong".into())));
        assert_eq!(ask(&r, "GET", "/ping/", &[]), None);
        assert_eq!(
            ask(&r, "GET", "/v2/ready", &[]),
            Some((200, "ready".into()))
        );
        assert_eq!(ask(&r, "GET", "/v2/ready/x", &[]), None, "anchored");
    }

    #[test]
    fn headers_query_and_method_are_anded_and_the_first_rule_wins() {
        let r = rules(
            "- match:\n    method: GET\n    headers: [{name: User-Agent, type: RegularExpression, value: 'kube-probe/.*'}]\n    queryParams: [{name: check, value: 'a b'}]\n  response: {status: 200, body: first}\n\
             - match: {headers: [{name: x-lb, value: 'yes'}]}\n  response: {status: 503, body: second}\n",
        );
        let ua = ("user-agent", "kube-probe/1.36");
        assert_eq!(
            ask(&r, "GET", "/?check=a+b", &[ua]),
            Some((200, "first".into()))
        );
        assert_eq!(
            ask(&r, "get", "/?check=a%20b", &[ua]),
            Some((200, "first".into())),
            "method case"
        );
        assert_eq!(ask(&r, "POST", "/?check=a+b", &[ua]), None, "method");
        assert_eq!(ask(&r, "GET", "/?check=other", &[ua]), None, "query");
        assert_eq!(
            ask(&r, "GET", "/?check=a+b", &[("user-agent", "curl")]),
            None,
            "header"
        );
        assert_eq!(
            ask(&r, "GET", "/?check=a+b", &[ua, ("X-LB", "yes")]),
            Some((200, "first".into())),
            "first match wins"
        );
        assert_eq!(
            ask(&r, "PUT", "/", &[("x-lb", "yes")]),
            Some((503, "second".into()))
        );
    }

    #[test]
    fn head_gets_no_body() {
        let r = rules("- response: {status: 200, body: hello}\n");
        assert_eq!(ask(&r, "HEAD", "/", &[]), Some((200, String::new())));
    }

    #[test]
    fn a_broken_rule_is_reported_and_the_others_still_apply() {
        let specs: Vec<ProbeResponse> = serde_yaml::from_str(
            "- match: {path: {type: RegularExpression, value: '(['}}\n  response: {status: 200}\n\
             - match: {path: {value: /ok}}\n  response: {status: 200, body: ok}\n",
        )
        .unwrap();
        let (r, errors) = ProbeRules::compile(&specs);
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].starts_with("probeResponse[0]: invalid regular expression"),
            "{errors:?}"
        );
        assert_eq!(ask(&r, "GET", "/ok", &[]), Some((200, "ok".into())));
        assert_eq!(ask(&r, "GET", "/([", &[]), None);
    }
}
