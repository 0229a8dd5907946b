//! Shared by the DynamoDB DR tests: Admiral's lease table.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
};

/// Creates `table` as Admiral's lease table: hash key `leaseName` (string), on demand.
///
/// # Panics
/// When DynamoDB refuses it.
pub async fn create_table(client: &aws_sdk_dynamodb::Client, table: &str) {
    client
        .create_table()
        .table_name(table)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("leaseName")
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("an attribute definition"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("leaseName")
                .key_type(KeyType::Hash)
                .build()
                .expect("a key schema"),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .expect("create the table");
}
