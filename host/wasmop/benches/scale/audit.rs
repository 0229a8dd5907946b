//! The API server's audit log (Metadata level, `deploy/dev/cluster.sh logs`/audit.log), read
//! incrementally: requests by user, verb and resource, and the first write on an object after
//! a moment.

use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use crate::common::Counts;

/// Verbs that change something.
pub const WRITES: [&str; 5] = ["create", "update", "patch", "delete", "deletecollection"];

/// One audit event.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The request's id (a watch has two events, ResponseStarted and ResponseComplete).
    pub id: String,
    /// The user it acts as.
    pub user: String,
    /// `get`, `list`, `watch`, `patch`, ...
    pub verb: String,
    /// `resource[/subresource]`.
    pub resource: String,
    /// The object's namespace (empty for cluster-scoped requests).
    pub namespace: String,
    /// The object's name (empty for lists and watches).
    pub name: String,
    /// The response code (0 while a watch is still open).
    pub code: u16,
    /// When the API server received the request.
    pub received: Timestamp,
}

impl Entry {
    /// Whether it changes something.
    pub fn is_write(&self) -> bool {
        WRITES.contains(&self.verb.as_str())
    }

    fn parse(line: &str) -> Option<Self> {
        let v: Value = serde_json::from_str(line).ok()?;
        let o = &v["objectRef"];
        let resource = match (o["resource"].as_str(), o["subresource"].as_str()) {
            (Some(r), Some(sub)) => format!("{r}/{sub}"),
            (Some(r), None) => r.to_owned(),
            // A request for no resource (discovery, /version): its path.
            (None, _) => v["requestURI"]
                .as_str()
                .unwrap_or("?")
                .split('?')
                .next()
                .unwrap_or("?")
                .to_owned(),
        };
        Some(Self {
            id: v["auditID"].as_str()?.to_owned(),
            user: v["impersonatedUser"]["username"]
                .as_str()
                .or(v["user"]["username"].as_str())?
                .to_owned(),
            verb: v["verb"].as_str()?.to_owned(),
            resource,
            namespace: o["namespace"].as_str().unwrap_or_default().to_owned(),
            name: o["name"].as_str().unwrap_or_default().to_owned(),
            code: u16::try_from(v["responseStatus"]["code"].as_u64().unwrap_or(0)).unwrap_or(0),
            received: v["requestReceivedTimestamp"].as_str()?.parse().ok()?,
        })
    }
}

/// The audit log path.
///
/// # Panics
/// When `cluster.sh logs` fails.
pub fn path() -> PathBuf {
    wasmop_tests::dr::audit_log()
}

/// Reads the audit log from an offset on, one complete line at a time, keeping the events of
/// users whose names start with one of `prefixes` (e.g. `system:serviceaccount:<ns>:`).
pub struct Tail {
    path: PathBuf,
    offset: u64,
    prefixes: Vec<String>,
}

impl Tail {
    /// A tail from the log's current end.
    pub fn from_end(prefixes: Vec<String>) -> Self {
        let path = path();
        let offset = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        Self {
            path,
            offset,
            prefixes,
        }
    }

    /// The events appended since the last call (or since the tail was made).
    pub fn read(&mut self) -> Vec<Entry> {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return Vec::new();
        };
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut buf = Vec::new();
        if f.read_to_end(&mut buf).is_err() {
            return Vec::new();
        }
        // Only whole lines: the API server may be writing the last one.
        let Some(end) = buf.iter().rposition(|b| *b == b'\n') else {
            return Vec::new();
        };
        self.offset += end as u64 + 1;
        String::from_utf8_lossy(&buf[..end])
            .lines()
            .filter(|l| self.prefixes.iter().any(|p| l.contains(p.as_str())))
            .filter_map(Entry::parse)
            .filter(|e| self.prefixes.iter().any(|p| e.user.starts_with(p.as_str())))
            .collect()
    }
}

/// What a set of users sent in a window.
#[derive(Clone, Debug, Default)]
pub struct Window {
    /// Requests (each counted once, watches included) by `verb resource`.
    pub by_request: Counts,
    /// Writes by `verb resource namespace/name`.
    pub writes: Counts,
    /// Requests per user.
    pub by_user: Counts,
    /// Answers 429 (Too Many Requests).
    pub throttled: u64,
    /// The window's length.
    pub length: Duration,
}

impl Window {
    /// The requests of `users` received in `[from, to)` among `entries`.
    pub fn of(entries: &[Entry], users: &[String], from: Timestamp, to: Timestamp) -> Self {
        let mut seen = HashSet::new();
        let mut w = Self {
            length: Duration::from_secs_f64(secs_between(to, from).max(0.0)),
            ..Self::default()
        };
        for e in entries {
            if e.received < from || e.received >= to || !users.contains(&e.user) {
                continue;
            }
            if e.code == 429 {
                w.throttled += 1;
            }
            if !seen.insert(e.id.clone()) {
                continue;
            }
            *w.by_request
                .entry(format!("{} {}", e.verb, e.resource))
                .or_default() += 1;
            *w.by_user.entry(e.user.clone()).or_default() += 1;
            if e.is_write() {
                *w.writes
                    .entry(format!(
                        "{} {} {}/{}",
                        e.verb, e.resource, e.namespace, e.name
                    ))
                    .or_default() += 1;
            }
        }
        w
    }

    fn minutes(&self) -> f64 {
        self.length.as_secs_f64().max(1.0) / 60.0
    }

    /// All requests per minute.
    pub fn per_minute(&self) -> f64 {
        self.by_request.values().sum::<u64>() as f64 / self.minutes()
    }

    /// Requests per minute by `verb resource`.
    pub fn per_minute_by_request(&self) -> BTreeMap<String, f64> {
        self.by_request
            .iter()
            .map(|(k, v)| (k.clone(), *v as f64 / self.minutes()))
            .collect()
    }

    /// Writes to Leases (DR, leader election) per minute.
    pub fn lease_writes_per_minute(&self) -> f64 {
        self.writes
            .iter()
            .filter(|(k, _)| k.split(' ').nth(1) == Some("leases"))
            .map(|(_, v)| *v)
            .sum::<u64>() as f64
            / self.minutes()
    }

    /// Writes to anything but Leases.
    pub fn object_writes(&self) -> Vec<(&String, &u64)> {
        self.writes
            .iter()
            .filter(|(k, _)| k.split(' ').nth(1) != Some("leases"))
            .collect()
    }

    /// Writes to anything but Leases, per object of `objects` per hour.
    pub fn writes_per_object_hour(&self, objects: usize) -> f64 {
        let writes: u64 = self.object_writes().iter().map(|(_, v)| **v).sum();
        writes as f64 / objects.max(1) as f64 / (self.length.as_secs_f64().max(1.0) / 3600.0)
    }
}

/// Seconds from `earlier` to `later` (negative when `later` is earlier).
pub fn secs_between(later: Timestamp, earlier: Timestamp) -> f64 {
    later.duration_since(earlier).as_secs_f64()
}

/// Waits for the first write of `users` on an object named `name` received at or after `since`,
/// reading `tail` (whose unmatched events are dropped); returns how long after `since` it was
/// received, or `None` after `timeout`.
pub async fn first_write(
    tail: &mut Tail,
    users: &[String],
    name: &str,
    since: Timestamp,
    timeout: Duration,
) -> Option<f64> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        for e in tail.read() {
            if e.is_write() && e.name == name && e.received >= since && users.contains(&e.user) {
                return Some(secs_between(e.received, since).max(0.0));
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Watches for the first writes of `users` on several objects at once: `pending` maps an object
/// name to the moment it was changed; each match moves to the result with its delay.
pub struct Waiter {
    tail: Tail,
    users: Vec<String>,
    /// Changed objects without a write yet: name → when it was changed.
    pub pending: BTreeMap<String, Timestamp>,
    /// Delays found, in seconds.
    pub found: Vec<f64>,
}

impl Waiter {
    /// A waiter over the log from its current end.
    pub fn new(prefixes: Vec<String>, users: Vec<String>) -> Self {
        Self {
            tail: Tail::from_end(prefixes),
            users,
            pending: BTreeMap::new(),
            found: Vec::new(),
        }
    }

    /// Reads what is new and settles the pending objects it shows written.
    pub fn poll(&mut self) {
        for e in self.tail.read() {
            if !e.is_write() || !self.users.contains(&e.user) {
                continue;
            }
            if let Some(since) = self.pending.get(&e.name).copied()
                && e.received >= since
            {
                self.pending.remove(&e.name);
                self.found.push(secs_between(e.received, since).max(0.0));
            }
        }
    }
}
