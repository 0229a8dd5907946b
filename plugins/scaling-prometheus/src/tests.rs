use super::*;

const META: &str = r#"{"query":"sum(rate(http_requests_total[1m]))","serverAddress":"http://prometheus.monitoring:9090","threshold":"0.5"}"#;

fn meta(patch: &[(&str, Value)]) -> String {
    let mut v: Value = serde_json::from_str(META).unwrap();
    for (k, val) in patch {
        if val.is_null() {
            v.as_object_mut().unwrap().remove(*k);
        } else {
            v[*k] = val.clone();
        }
    }
    v.to_string()
}

fn parse_err(patch: &[(&str, Value)]) -> Error {
    Trigger::parse(&meta(patch)).unwrap_err()
}

fn vector(values: &[&str]) -> String {
    let result: Vec<Value> = values
        .iter()
        .map(|v| serde_json::json!({"metric": {"job": "x"}, "value": [1_700_000_000.123, v]}))
        .collect();
    serde_json::json!({"status": "success", "data": {"resultType": "vector", "result": result}})
        .to_string()
}

#[test]
fn parses_full_metadata() {
    let t = Trigger::parse(
        r#"{"query":"up","serverAddress":"HTTP://prom:9090/","threshold":2,"uptimeFilter":"job=\"prom\"",
            "headers":{"Authorization":"Bearer x","X-Scope-OrgID":"team"},"metricType":"ignored"}"#,
    )
    .unwrap();
    assert_eq!(t.query, "up");
    assert_eq!(t.server_address, "http://prom:9090");
    assert_eq!(t.authority(), "prom:9090");
    assert_eq!(t.threshold, 2.0);
    assert_eq!(t.uptime_filter, r#"job="prom""#);
    assert_eq!(
        t.headers.get("Authorization").map(String::as_str),
        Some("Bearer x")
    );
    assert_eq!(t.headers.len(), 2);
}

#[test]
fn defaults() {
    let t = Trigger::parse(META).unwrap();
    assert_eq!(t.uptime_filter, DEFAULT_UPTIME_FILTER);
    assert_eq!(t.uptime_filter, r#"container="prometheus""#);
    assert!(t.headers.is_empty());
    let blank = Trigger::parse(&meta(&[("uptimeFilter", "".into())])).unwrap();
    assert_eq!(blank.uptime_filter, DEFAULT_UPTIME_FILTER);
}

#[test]
fn threshold_as_number_or_string() {
    for (v, want) in [
        (serde_json::json!(0.5), 0.5),
        (serde_json::json!("0.5"), 0.5),
        (serde_json::json!(3), 3.0),
        (serde_json::json!("-2"), -2.0),
        (serde_json::json!(" 1e3 "), 1000.0),
    ] {
        assert_eq!(
            Trigger::parse(&meta(&[("threshold", v.clone())]))
                .unwrap()
                .threshold,
            want,
            "{v}"
        );
    }
}

#[test]
fn threshold_errors_name_the_field() {
    let e = parse_err(&[("threshold", "abc".into())]);
    assert_eq!(e.message, r#"metadata.threshold: "abc" is not a number"#);
    assert_eq!(e.field.as_deref(), Some("metadata.threshold"));
    assert_eq!(e.detail(), r#""abc" is not a number"#);
    assert_eq!(
        parse_err(&[("threshold", Value::Null)]).message,
        "metadata.threshold: is required"
    );
    assert_eq!(
        parse_err(&[("threshold", true.into())]).message,
        "metadata.threshold: must be a number or a numeric string, got true"
    );
    assert_eq!(
        parse_err(&[("threshold", "NaN".into())]).message,
        r#"metadata.threshold: "NaN" is not a finite number"#
    );
    assert_eq!(
        parse_err(&[("threshold", "inf".into())]).message,
        r#"metadata.threshold: "inf" is not a finite number"#
    );
}

#[test]
fn required_strings() {
    for key in ["query", "serverAddress"] {
        let e = parse_err(&[(key, Value::Null)]);
        assert_eq!(e.message, format!("metadata.{key}: is required"));
        assert_eq!(e.field, Some(format!("metadata.{key}")));
        assert_eq!(
            parse_err(&[(key, " ".into())]).message,
            format!("metadata.{key}: is required and must not be empty")
        );
        assert_eq!(
            parse_err(&[(key, 5.into())]).message,
            format!("metadata.{key}: must be a string, got 5")
        );
    }
    assert_eq!(
        parse_err(&[("uptimeFilter", 1.into())]).message,
        "metadata.uptimeFilter: must be a string, got 1"
    );
}

#[test]
fn metadata_must_be_an_object() {
    assert_eq!(
        Trigger::parse("[]").unwrap_err().message,
        "metadata: must be a JSON object, got []"
    );
    let e = Trigger::parse("{").unwrap_err();
    assert!(e.message.starts_with("metadata: not valid JSON: "), "{e}");
    assert_eq!(e.field.as_deref(), Some("metadata"));
}

#[test]
fn server_address_must_be_http_or_https() {
    let t = Trigger::parse(&meta(&[(
        "serverAddress",
        "HTTPS://prom.example/prometheus/".into(),
    )]))
    .unwrap();
    assert_eq!(t.server_address, "https://prom.example/prometheus");
    assert_eq!(t.authority(), "prom.example");
    for raw in ["prom:9090", "ftp://prom:9090"] {
        let e = parse_err(&[("serverAddress", raw.into())]);
        assert_eq!(e.field.as_deref(), Some("metadata.serverAddress"));
        assert_eq!(
            e.message,
            format!(
                r#"metadata.serverAddress: "{raw}" must be an http:// or https:// URL such as http://prometheus.monitoring:9090"#
            )
        );
    }
    for (bad, why) in [
        ("http://", "has no host"),
        ("http://:9090", "has no host"),
        ("http://prom:", "has an invalid port"),
        ("http://prom:0", "has an invalid port"),
        ("http://prom:70000", "has an invalid port"),
        ("http://prom:+90", "has an invalid port"),
        ("http://a:1:2", "has an invalid port"),
        ("http://[::1", "has an invalid IPv6 host"),
        ("http://[::1]x", "has an invalid IPv6 host"),
        ("http://prom/x?y=1", "must not contain a query or fragment"),
        (
            "http://pr om",
            "must not contain spaces or control characters",
        ),
        (
            "http://u:p@prom",
            "must not contain credentials; pass them in metadata.headers",
        ),
    ] {
        assert_eq!(
            parse_err(&[("serverAddress", bad.into())]).message,
            format!("metadata.serverAddress: {bad:?} {why}"),
            "{bad}"
        );
    }
    for (ok, norm) in [
        ("http://prom", "http://prom"),
        ("http://10.0.0.1:9090/", "http://10.0.0.1:9090"),
        ("http://[::1]:9090", "http://[::1]:9090"),
        (
            "http://prom:9090/prometheus/",
            "http://prom:9090/prometheus",
        ),
    ] {
        assert_eq!(
            Trigger::parse(&meta(&[("serverAddress", ok.into())]))
                .unwrap()
                .server_address,
            norm
        );
    }
}

#[test]
fn headers_are_validated() {
    let h = |v: Value| parse_err(&[("headers", v)]).message;
    assert_eq!(
        h("x".into()),
        r#"metadata.headers: must be an object of header name to value, got "x""#
    );
    assert_eq!(
        h(serde_json::json!({"X-A": 1})),
        "metadata.headers.X-A: must be a string, got 1"
    );
    assert_eq!(
        h(serde_json::json!({"bad name": "v"})),
        r#"metadata.headers.bad name: "bad name" is not a valid header name"#
    );
    assert_eq!(
        h(serde_json::json!({"X-A": "a\r\nb"})),
        "metadata.headers.X-A: must not contain CR, LF or NUL"
    );
}

#[test]
fn health_query_matches_upstream() {
    assert_eq!(
        health_query(DEFAULT_UPTIME_FILTER, 300),
        r#"min_over_time((max(up{container="prometheus"}) or vector(0))[300s:])"#
    );
    assert_eq!(
        health_query(r#"job="prom""#, 0),
        r#"min_over_time((max(up{job="prom"}) or vector(0))[900s:])"#
    );
}

#[test]
fn url_encoding() {
    assert_eq!(
        percent_encode(r#"up{container="prometheus"}"#),
        "up%7Bcontainer%3D%22prometheus%22%7D"
    );
    assert_eq!(
        query_url("http://prom:9090/", "sum(rate(x[1m]))"),
        "http://prom:9090/api/v1/query?query=sum%28rate%28x%5B1m%5D%29%29"
    );
    assert_eq!(
        query_url("http://prom:9090", &health_query(DEFAULT_UPTIME_FILTER, 60)),
        "http://prom:9090/api/v1/query?query=min_over_time%28%28max%28up%7Bcontainer%3D%22prometheus%22%7D%29%20or%20vector%280%29%29%5B60s%3A%5D%29"
    );
}

#[test]
fn parses_vector_and_scalar() {
    assert_eq!(parse_value(&vector(&["1.5"])), Ok(1.5));
    assert_eq!(parse_value(&vector(&["0"])), Ok(0.0));
    assert_eq!(parse_value(&vector(&["-3e2"])), Ok(-300.0));
    let scalar = r#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"1"]}}"#;
    assert_eq!(parse_value(scalar), Ok(1.0));
}

#[test]
fn value_errors() {
    assert_eq!(
        parse_value(&vector(&[])).unwrap_err(),
        "query returned no series; check the query or that the target exports the metric"
    );
    assert_eq!(
        parse_value(&vector(&["1", "2", "3"])).unwrap_err(),
        "query returned 3 series; aggregate it to one, e.g. with sum()"
    );
    assert_eq!(
        parse_value(&vector(&["NaN"])).unwrap_err(),
        "query returned NaN; the value must be a finite number"
    );
    assert_eq!(
        parse_value(&vector(&["+Inf"])).unwrap_err(),
        "query returned +Inf; the value must be a finite number"
    );
    assert_eq!(
        parse_value(&vector(&["-Inf"])).unwrap_err(),
        "query returned -Inf; the value must be a finite number"
    );
    assert_eq!(
        parse_value(&vector(&["x"])).unwrap_err(),
        r#"query returned "x", which is not a number"#
    );

    let failed = r#"{"status":"error","errorType":"bad_data","error":"1:5: parse error: unexpected end of input"}"#;
    assert_eq!(
        parse_value(failed).unwrap_err(),
        r#"Prometheus query failed with status "error" (bad_data): 1:5: parse error: unexpected end of input"#
    );
    assert!(
        parse_value(r#"{"data":{}}"#)
            .unwrap_err()
            .starts_with("Prometheus response has no status")
    );

    let e = parse_value("<html>502 Bad Gateway</html>").unwrap_err();
    assert!(
        e.starts_with("Prometheus response is not valid JSON ("),
        "{e}"
    );
    assert!(e.ends_with("): <html>502 Bad Gateway</html>"), "{e}");

    let matrix = r#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
    assert_eq!(
        parse_value(matrix).unwrap_err(),
        "query returned a matrix result; it must return an instant vector of one series or a scalar"
    );
    assert_eq!(
        parse_value(r#"{"status":"success"}"#).unwrap_err(),
        "Prometheus response has no data"
    );
    let malformed = parse_value(r#"{"status":"success","data":{}}"#).unwrap_err();
    assert!(
        malformed.starts_with("Prometheus response data is malformed: missing field"),
        "{malformed}"
    );
    let bad_sample = r#"{"status":"success","data":{"resultType":"scalar","result":[1,2]}}"#;
    assert_eq!(
        parse_value(bad_sample).unwrap_err(),
        r#"Prometheus sample [1,2] is not [timestamp, "value"]"#
    );
}

#[test]
fn decisions() {
    let down = decide(0.2, 0.5);
    assert_eq!(
        down,
        Vote {
            vote: Direction::Down,
            value: Some(0.2),
            reason: "value 0.2 below threshold 0.5".into()
        }
    );
    let at = decide(0.5, 0.5);
    assert_eq!(
        at,
        Vote {
            vote: Direction::Up,
            value: Some(0.5),
            reason: "value 0.5 at or above threshold 0.5".into()
        }
    );
    assert_eq!(decide(7.0, 0.5).reason, "value 7 at or above threshold 0.5");
    assert_eq!(
        decide(0.0, 0.0).vote,
        Direction::Up,
        "0 is not below a threshold of 0"
    );
    assert_eq!(decide(-1.0, 0.0).vote, Direction::Down);
}

#[test]
fn failed_health_is_no_vote() {
    assert_eq!(check_health(1.0, DEFAULT_UPTIME_FILTER, 300), Ok(()));
    for health in [0.0, 0.5, 2.0] {
        let e = check_health(health, r#"job="prom""#, 300).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("metadata.uptimeFilter"));
        assert_eq!(
            e.message,
            format!(
                "metadata.uptimeFilter: Prometheus health check failed: up{{job=\"prom\"}} was not 1 \
                 for the whole last 300s (got {health}); no vote until the scrape target has been up \
                 for a full cooldown period"
            )
        );
    }
    let e = check_health(0.0, DEFAULT_UPTIME_FILTER, 0).unwrap_err();
    assert!(e.message.contains("the whole last 900s"), "{e}");
}

#[test]
fn settings() {
    assert_eq!(validate_settings("{}"), Ok(Settings { timeout_ms: 5000 }));
    assert_eq!(
        validate_settings(r#"{"timeoutMs":1500}"#),
        Ok(Settings { timeout_ms: 1500 })
    );
    for bad in ["0", "-1", "1.5", "\"5000\"", "null"] {
        let e = validate_settings(&format!(r#"{{"timeoutMs":{bad}}}"#)).unwrap_err();
        assert_eq!(
            e.message,
            format!(
                "settings.timeoutMs: must be a positive whole number of milliseconds, got {bad}"
            )
        );
        assert_eq!(e.field.as_deref(), Some("settings.timeoutMs"));
    }
    let e = validate_settings(r#"{"timeout":1,"timeoutMs":1}"#).unwrap_err();
    assert_eq!(
        e.message,
        r#"settings: unknown key "timeout"; the only setting is timeoutMs"#
    );
    let e = validate_settings(r#"{"b":1,"a":2}"#).unwrap_err();
    assert_eq!(
        e.message,
        r#"settings: unknown keys "a", "b"; the only setting is timeoutMs"#
    );
    assert_eq!(
        validate_settings("[]").unwrap_err().message,
        "settings: must be a JSON object, got []"
    );
    assert!(
        validate_settings("{")
            .unwrap_err()
            .message
            .starts_with("settings: not valid JSON: ")
    );
}

#[test]
fn trigger_type() {
    assert!(check_trigger_type("prometheus").is_ok());
    let e = check_trigger_type("cpu").unwrap_err();
    assert_eq!(
        e.message,
        r#"type: trigger type "cpu" is not handled by scaling-prometheus, which handles "prometheus""#
    );
}

#[test]
fn http_error_texts() {
    let body = format!("{{\"error\":\"{}\"}}\n", "x".repeat(300));
    let e = status_error(
        "http://prom:9090/api/v1/query?query=up",
        503,
        body.as_bytes(),
    );
    assert!(
        e.starts_with(
            "GET http://prom:9090/api/v1/query?query=up returned HTTP 503: {\"error\":\"xxx"
        ),
        "{e}"
    );
    assert!(e.ends_with("x..."), "{e}");
    assert_eq!(e.len() - e.find(": {").unwrap() - 2, BODY_EXCERPT_BYTES + 3);
    assert_eq!(
        status_error("http://p/", 400, b"bad\nrequest"),
        "GET http://p/ returned HTTP 400: bad request"
    );
    // A multi-byte character cut at byte 200 is dropped, not replaced.
    let cut = format!("{}é", "a".repeat(199));
    assert_eq!(excerpt(cut.as_bytes()), format!("{}...", "a".repeat(199)));

    let s = "http://prom.monitoring:9090";
    assert_eq!(
        transport_error(s, &TransportError::Denied, 5000),
        "request to serverAddress http://prom.monitoring:9090 was denied: its host (prom.monitoring:9090) must be listed in the plugin's grants.allowedHosts"
    );
    assert_eq!(
        transport_error(s, &TransportError::ConnectionRefused, 5000),
        "connection to serverAddress http://prom.monitoring:9090 was refused: nothing listens on \
         prom.monitoring:9090; check that Prometheus runs there and serves that port"
    );
    for (s, at) in [
        ("http://prom/", "prom:80"),
        ("https://prom.example", "prom.example:443"),
        ("https://[::1]", "[::1]:443"),
    ] {
        let refused = transport_error(s, &TransportError::ConnectionRefused, 1);
        assert!(
            refused.contains(&format!("nothing listens on {at};")),
            "{refused}"
        );
    }
    assert_eq!(
        transport_error(s, &TransportError::Timeout, 2500),
        "request to serverAddress http://prom.monitoring:9090 timed out after 2500 ms"
    );
    assert_eq!(
        transport_error(s, &TransportError::Dns, 1),
        "could not resolve the host of serverAddress http://prom.monitoring:9090"
    );
    assert_eq!(
        transport_error(s, &TransportError::Other("boom".into()), 1),
        "request to serverAddress http://prom.monitoring:9090 failed: boom"
    );
    for (s, name) in [
        ("https://prom.example", "prom.example"),
        ("https://prom.example:8443/p", "prom.example"),
        ("https://[::1]:8443", "[::1]"),
        ("https://[::1]", "[::1]"),
    ] {
        assert_eq!(
            transport_error(s, &TransportError::UntrustedCertificate, 1),
            format!(
                "the TLS certificate of serverAddress {s} is not trusted: it must be valid for \
                 {name} and signed by a public CA or by a CA of wasmop run --extra-ca-file"
            )
        );
    }
    let s = "https://prom.example";
    assert_eq!(
        transport_error(s, &TransportError::Tls("protocol error".into()), 1),
        "the TLS handshake with serverAddress https://prom.example failed: protocol error"
    );
}

/// The WIT message leaves out the field the host shows before it; a message that does not
/// start with its field, or has none, is kept whole.
#[test]
fn the_detail_leaves_the_field_to_the_host() {
    assert_eq!(
        Error::field("metadata.query", "query returned no series").detail(),
        "query returned no series"
    );
    let other = Error {
        message: "metadata.queryX: odd".into(),
        field: Some("metadata.query".into()),
    };
    assert_eq!(other.detail(), "metadata.queryX: odd");
    assert_eq!(Error::general("no vote").detail(), "no vote");
}

#[test]
fn error_fields_become_paths_of_the_request() {
    assert_eq!(request_field("type"), "request.trigger-type");
    assert_eq!(request_field("metadata.query"), "request.metadata.query");
    assert_eq!(request_field("metadata"), "request.metadata");
    assert_eq!(request_field("settings"), "settings");
    assert_eq!(request_field("settings.timeoutMs"), "settings.timeoutMs");
}
