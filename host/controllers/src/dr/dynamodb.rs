//! The `dynamodb` backend: one item of Admiral's lease table (docs/dr.md), so wasmop can
//! share a table, and a lease, with Admiral instances.
//!
//! | attribute | type | |
//! |---|---|---|
//! | `leaseName` | S | partition key |
//! | `leaseOwner` | S | the holder |
//! | `notes` | S | `Created at <unix seconds>`, carried on every write |
//! | `updatedTime` | N | Unix **seconds** of the last write, rounded up |
//!
//! Reads are `GetItem` with `ConsistentRead` (Admiral scanned, eventually consistent). Writes
//! are whole-item `PutItem`s, as Admiral's, but conditional: a create on
//! `attribute_not_exists(leaseName)`, a renewal or takeover on the `leaseOwner` and
//! `updatedTime` that were read. Admiral's unconditional writes erase nothing this condition
//! needs, so both can share the table; an Admiral write between a read and a wasmop write makes
//! the wasmop write fail, as it should. SDK retries are off: a retried conditional write could
//! report a conflict for a write that succeeded; the loop retries on its next tick instead.
//!
//! Credentials come from the AWS default chain (environment, web identity, ECS, instance
//! metadata); with `role` set they are exchanged through STS `AssumeRole` for that role's.

use std::collections::HashMap;

use aws_config::BehaviorVersion;
use aws_config::retry::RetryConfig;
use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;

use super::backend::{BackendError, LeaseBackend, Observed, Record, Version};
use super::config::DynamoDbConfig;
use wasmop_plugin_host::LeaseAction;

/// An item of a DynamoDB lease table.
pub struct DynamoDbLease {
    client: Client,
    config: DynamoDbConfig,
}

/// The STS session name of the assumed role.
const SESSION_NAME: &str = "wasmop-dr";

/// The SDK's HTTP client: hyper with rustls on ring (the crypto of the rest of wasmop).
pub fn http_client() -> aws_sdk_dynamodb::config::SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
            aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https()
}

impl DynamoDbLease {
    /// A client for `config`: the AWS default credential chain, its region and endpoint
    /// override, and its role.
    pub async fn new(config: &DynamoDbConfig) -> Self {
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(aws_config::Region::new(config.region.clone()))
            .http_client(http_client())
            .retry_config(RetryConfig::disabled());
        if let Some(endpoint) = &config.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        Self::from_sdk_config(loader.load().await, config).await
    }

    /// A client over `sdk` (credentials, region, endpoint, HTTP client); with `config.role`
    /// set, its credentials are exchanged through STS `AssumeRole` (session `wasmop-dr`) for
    /// the role's.
    pub async fn from_sdk_config(mut sdk: aws_config::SdkConfig, config: &DynamoDbConfig) -> Self {
        if let Some(role) = &config.role {
            let provider = aws_config::sts::AssumeRoleProvider::builder(role)
                .session_name(SESSION_NAME)
                .configure(&sdk)
                .build()
                .await;
            sdk = sdk
                .into_builder()
                .credentials_provider(aws_sdk_dynamodb::config::SharedCredentialsProvider::new(
                    provider,
                ))
                .build();
        }
        Self::from_client(Client::new(&sdk), config)
    }

    /// A backend over an existing client (e.g. one with static credentials, in tests).
    pub fn from_client(client: Client, config: &DynamoDbConfig) -> Self {
        Self {
            client,
            config: config.clone(),
        }
    }

    fn key(&self) -> AttributeValue {
        AttributeValue::S(self.config.lease_name.clone())
    }
}

fn string(item: &HashMap<String, AttributeValue>, name: &str) -> Option<String> {
    match item.get(name)? {
        AttributeValue::S(s) => Some(s.clone()),
        AttributeValue::N(n) => Some(n.clone()),
        _ => None,
    }
}

/// The record an item holds; `updatedTime` in seconds becomes milliseconds.
pub(crate) fn record_of(item: &HashMap<String, AttributeValue>) -> Record {
    let seconds = string(item, "updatedTime")
        .and_then(|n| n.parse::<f64>().ok())
        .map_or(0, |s| s as i64);
    Record {
        owner: string(item, "leaseOwner").unwrap_or_default(),
        updated_ms: seconds.saturating_mul(1000),
        notes: string(item, "notes").unwrap_or_default(),
    }
}

/// The error text of an SDK error with its cause chain (the SDK's `Display` is terse).
fn describe<E: std::error::Error>(e: &E) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[async_trait::async_trait]
impl LeaseBackend for DynamoDbLease {
    fn kind(&self) -> &'static str {
        "dynamodb"
    }

    fn describe(&self) -> String {
        format!(
            "DynamoDB table {} item {} ({}{})",
            self.config.table,
            self.config.lease_name,
            self.config.region,
            self.config
                .endpoint
                .as_deref()
                .map(|e| format!(", {e}"))
                .unwrap_or_default()
        )
    }

    fn stamp(&self, wall_ms: i64) -> i64 {
        // Whole seconds, rounded up: the stored time is never earlier than the write.
        (wall_ms + 999).div_euclid(1000) * 1000
    }

    async fn read(&self) -> Result<Option<Observed>, BackendError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.config.table)
            .key("leaseName", self.key())
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| {
                BackendError::Unavailable(format!(
                    "cannot read {}: {}",
                    self.describe(),
                    describe(&e)
                ))
            })?;
        Ok(out.item().map(|item| Observed {
            record: record_of(item),
            version: Version::Item {
                owner: string(item, "leaseOwner"),
                updated: string(item, "updatedTime"),
            },
        }))
    }

    async fn write(
        &self,
        action: LeaseAction,
        read: Option<&Observed>,
        record: &Record,
        _expiry_seconds: u32,
    ) -> Result<(), BackendError> {
        let mut put = self
            .client
            .put_item()
            .table_name(&self.config.table)
            .item("leaseName", self.key())
            .item("leaseOwner", AttributeValue::S(record.owner.clone()))
            .item("notes", AttributeValue::S(record.notes.clone()))
            .item(
                "updatedTime",
                AttributeValue::N(record.updated_ms.div_euclid(1000).to_string()),
            );
        put = match (action, read.map(|o| &o.version)) {
            (LeaseAction::Create, None) => {
                put.condition_expression("attribute_not_exists(leaseName)")
            }
            (
                LeaseAction::Renew | LeaseAction::Takeover,
                Some(Version::Item { owner, updated }),
            ) => {
                let mut clauses = vec!["attribute_exists(leaseName)".to_owned()];
                match owner {
                    Some(o) => {
                        clauses.push("leaseOwner = :owner".into());
                        put =
                            put.expression_attribute_values(":owner", AttributeValue::S(o.clone()));
                    }
                    None => clauses.push("attribute_not_exists(leaseOwner)".into()),
                }
                match updated {
                    Some(u) => {
                        clauses.push("updatedTime = :updated".into());
                        put = put
                            .expression_attribute_values(":updated", AttributeValue::N(u.clone()));
                    }
                    None => clauses.push("attribute_not_exists(updatedTime)".into()),
                }
                put.condition_expression(clauses.join(" AND "))
            }
            _ => return Err(BackendError::Conflict),
        };
        match put.send().await {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|s| s.is_conditional_check_failed_exception()) =>
            {
                Err(BackendError::Conflict)
            }
            Err(e) => Err(BackendError::Unavailable(format!(
                "cannot write {}: {}",
                self.describe(),
                describe(&e)
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_read_as_records_in_milliseconds() {
        let item: HashMap<String, AttributeValue> = [
            ("leaseName".to_owned(), AttributeValue::S("mylease".into())),
            (
                "leaseOwner".to_owned(),
                AttributeValue::S("qal-east".into()),
            ),
            (
                "notes".to_owned(),
                AttributeValue::S("Created at 1700000000".into()),
            ),
            (
                "updatedTime".to_owned(),
                AttributeValue::N("1700000015".into()),
            ),
        ]
        .into();
        assert_eq!(
            record_of(&item),
            Record {
                owner: "qal-east".into(),
                updated_ms: 1_700_000_015_000,
                notes: "Created at 1700000000".into()
            }
        );
        assert_eq!(
            record_of(&HashMap::new()),
            Record {
                owner: String::new(),
                updated_ms: 0,
                notes: String::new()
            },
            "Admiral's fresh item has no owner or time"
        );
    }
}
