//! The `dynamodb` DR backend against a real DynamoDB-compatible server: moto in server mode on
//! loopback (scripts/setup.d/40-moto.sh). Consistent reads, conditional create / renew /
//! takeover, an Admiral-style unconditional write between a read and a write failing the
//! compare-and-swap, Admiral's item without an owner, whole seconds rounded up, a role assumed
//! through STS (moto's STS, on the same endpoint), and an unreachable endpoint.

use aws_sdk_dynamodb::types::AttributeValue;
use wasmop_controllers::dr::backend::{BackendError, LeaseBackend, Record};
use wasmop_controllers::dr::config::DynamoDbConfig;
use wasmop_controllers::dr::dynamodb::DynamoDbLease;
use wasmop_plugin_host::LeaseAction;
use wasmop_tests::dr::{Moto, create_table};

const TABLE: &str = "admiral-lease";

fn client(endpoint: &str) -> aws_sdk_dynamodb::Client {
    let creds =
        aws_sdk_dynamodb::config::Credentials::new("testing", "testing", None, None, "test");
    aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::Config::builder()
            .behavior_version(aws_sdk_dynamodb::config::BehaviorVersion::latest())
            .region(aws_sdk_dynamodb::config::Region::new("us-east-1"))
            .endpoint_url(endpoint)
            .http_client(wasmop_controllers::dr::dynamodb::http_client())
            .credentials_provider(creds)
            .build(),
    )
}

fn config(endpoint: &str, lease: &str) -> DynamoDbConfig {
    DynamoDbConfig {
        table: TABLE.into(),
        lease_name: lease.into(),
        region: "us-east-1".into(),
        role: None,
        endpoint: Some(endpoint.into()),
    }
}

fn record(owner: &str, updated_ms: i64, notes: &str) -> Record {
    Record {
        owner: owner.into(),
        updated_ms,
        notes: notes.into(),
    }
}

/// An Admiral instance's write: the whole item, no condition.
async fn admiral_put(
    c: &aws_sdk_dynamodb::Client,
    lease: &str,
    owner: Option<&str>,
    seconds: Option<i64>,
) {
    let mut put = c
        .put_item()
        .table_name(TABLE)
        .item("leaseName", AttributeValue::S(lease.into()))
        .item("notes", AttributeValue::S("Created at 1700000000".into()));
    if let Some(o) = owner {
        put = put.item("leaseOwner", AttributeValue::S(o.into()));
    }
    if let Some(s) = seconds {
        put = put.item("updatedTime", AttributeValue::N(s.to_string()));
    }
    put.send().await.expect("Admiral's write");
}

#[tokio::test]
#[ignore = "needs moto from scripts/setup.sh: run with make test"]
async fn conditional_writes_on_admirals_table() {
    let moto = Moto::start("dr-dynamodb").await;
    let c = client(&moto.endpoint);
    create_table(&c, TABLE).await;
    let lease = DynamoDbLease::from_client(c.clone(), &config(&moto.endpoint, "wasmop"));
    assert!(lease.describe().contains("admiral-lease"));

    // Whole seconds, rounded up.
    assert_eq!(lease.stamp(1_700_000_000_001), 1_700_000_001_000);
    assert_eq!(lease.stamp(1_700_000_001_000), 1_700_000_001_000);

    assert_eq!(lease.read().await.unwrap(), None);
    let a = record("a", 1_700_000_001_000, "Created at 1700000000");
    lease.write(LeaseAction::Create, None, &a, 3).await.unwrap();
    let read = lease.read().await.unwrap().expect("the item");
    assert_eq!(read.record, a);
    assert_eq!(
        lease.write(LeaseAction::Create, None, &a, 3).await,
        Err(BackendError::Conflict),
        "a second create"
    );

    // Renewal on what was read.
    let renewed = record("a", 1_700_000_002_000, &a.notes);
    lease
        .write(LeaseAction::Renew, Some(&read), &renewed, 3)
        .await
        .unwrap();
    assert_eq!(
        lease
            .write(LeaseAction::Renew, Some(&read), &renewed, 3)
            .await,
        Err(BackendError::Conflict),
        "a renewal on a stale read"
    );

    // An Admiral instance writes between our read and our write: our write fails.
    let read = lease.read().await.unwrap().unwrap();
    admiral_put(&c, "wasmop", Some("admiral-east"), Some(1_700_000_002)).await;
    assert_eq!(
        lease
            .write(
                LeaseAction::Renew,
                Some(&read),
                &record("a", 1_700_000_003_000, &a.notes),
                3
            )
            .await,
        Err(BackendError::Conflict)
    );
    let read = lease.read().await.unwrap().unwrap();
    assert_eq!(
        read.record,
        record("admiral-east", 1_700_000_002_000, "Created at 1700000000")
    );
    let b = record("b", 1_700_000_010_000, &read.record.notes);
    lease
        .write(LeaseAction::Takeover, Some(&read), &b, 3)
        .await
        .unwrap();
    assert_eq!(lease.read().await.unwrap().unwrap().record, b);

    // Admiral's fresh item has neither owner nor time: taken over on their absence.
    let other = DynamoDbLease::from_client(c.clone(), &config(&moto.endpoint, "fresh"));
    admiral_put(&c, "fresh", None, None).await;
    let read = other.read().await.unwrap().unwrap();
    assert_eq!(read.record.owner, "");
    assert_eq!(read.record.updated_ms, 0);
    let mine = record("a", 1_700_000_020_000, &read.record.notes);
    other
        .write(LeaseAction::Takeover, Some(&read), &mine, 3)
        .await
        .unwrap();
    assert_eq!(other.read().await.unwrap().unwrap().record, mine);
}

#[tokio::test]
#[ignore = "needs moto from scripts/setup.sh: run with make test"]
async fn an_unreachable_endpoint_is_a_clear_error() {
    let endpoint = format!("http://127.0.0.1:{}", wasmop_tests::free_port());
    let lease = DynamoDbLease::from_client(client(&endpoint), &config(&endpoint, "wasmop"));
    match lease.read().await {
        Err(BackendError::Unavailable(e)) => {
            assert!(
                e.contains("cannot read DynamoDB table admiral-lease item wasmop"),
                "{e}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
#[ignore = "needs moto from scripts/setup.sh: run with make test"]
async fn a_role_is_assumed_through_sts() {
    let moto = Moto::start("dr-dynamodb-sts").await;
    create_table(&client(&moto.endpoint), TABLE).await;
    // The base credentials are static (not the environment's); the role's come from STS.
    let base = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(&moto.endpoint)
        .http_client(wasmop_controllers::dr::dynamodb::http_client())
        .credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            "testing", "testing", None, None, "test",
        ))
        .load()
        .await;
    let role = "arn:aws:iam::123456789012:role/admiral";
    let mut cfg = config(&moto.endpoint, "sts");
    cfg.role = Some(role.into());
    let lease = DynamoDbLease::from_sdk_config(base, &cfg).await;
    let a = record("a", 1_700_000_001_000, "Created at 1700000000");
    lease.write(LeaseAction::Create, None, &a, 3).await.unwrap();
    assert_eq!(lease.read().await.unwrap().unwrap().record, a);
    // moto keeps the sessions it issued.
    let (_, body) =
        wasmop_tests::http_get(&moto.addr, "/moto-api/data.json").expect("moto's state");
    let state: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let sessions = state["sts"]["AssumedRole"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        sessions
            .iter()
            .any(|s| s["role_arn"] == role && s["session_name"] == "wasmop-dr"),
        "no AssumeRole session for {role}: {sessions:?}"
    );
}
