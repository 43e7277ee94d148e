//! The test registry against the API its clients use.

use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP/1.1 request to `registry`: the status and the JSON body.
async fn call(
    registry: &TestRegistry,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut stream = tokio::net::TcpStream::connect(registry.addr).await.unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: {CONTENT_TYPE}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let status = answer.get(9..12).unwrap().parse().unwrap();
    assert!(answer.contains(CONTENT_TYPE), "{answer}");
    let (_, body) = answer.split_once("\r\n\r\n").unwrap();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn registers_versions_and_answers_lookups_and_errors() {
    let registry = TestRegistry::start().await;
    let first = json!({"schema": "\"int\""});
    let (status, body) = call(
        &registry,
        "POST",
        "/subjects/a-value/versions",
        Some(first.clone()),
    )
    .await;
    assert_eq!((status, &body["id"]), (200, &json!(1)));
    let (_, again) = call(
        &registry,
        "POST",
        "/subjects/a-value/versions?normalize=false",
        Some(first.clone()),
    )
    .await;
    assert_eq!(again["id"], json!(1), "same schema, same id");
    let (_, other) = call(
        &registry,
        "POST",
        "/subjects/b-value/versions",
        Some(first.clone()),
    )
    .await;
    assert_eq!(
        other["id"],
        json!(1),
        "same schema in another subject, same id"
    );
    let (_, second) = call(
        &registry,
        "POST",
        "/subjects/a-value/versions",
        Some(json!({"schema": "\"long\""})),
    )
    .await;
    assert_eq!(second["id"], json!(2));
    let (_, latest) = call(&registry, "GET", "/subjects/a-value/versions/latest", None).await;
    assert_eq!(
        (&latest["version"], &latest["id"], &latest["subject"]),
        (&json!(2), &json!(2), &json!("a-value"))
    );
    assert!(
        latest.get("schemaType").is_none(),
        "omitted for Avro: {latest}"
    );
    let (_, found) = call(
        &registry,
        "POST",
        "/subjects/a-value?normalize=false",
        Some(first),
    )
    .await;
    assert_eq!((&found["version"], &found["id"]), (&json!(1), &json!(1)));
    let (status, body) = call(
        &registry,
        "POST",
        "/subjects/a-value",
        Some(json!({"schema": "\"bytes\""})),
    )
    .await;
    assert_eq!((status, &body["error_code"]), (404, &json!(40403)));
    let (status, body) = call(&registry, "GET", "/subjects/nope/versions/1", None).await;
    assert_eq!((status, &body["error_code"]), (404, &json!(40401)));
    let (status, body) = call(&registry, "GET", "/subjects/a-value/versions/9", None).await;
    assert_eq!((status, &body["error_code"]), (404, &json!(40402)));
    let (status, body) = call(&registry, "GET", "/subjects/a-value/versions/x", None).await;
    assert_eq!((status, &body["error_code"]), (422, &json!(42202)));
    let (status, body) = call(&registry, "GET", "/schemas/ids/77", None).await;
    assert_eq!((status, &body["error_code"]), (404, &json!(40403)));
    let bad_ref =
        json!({"schema": "x", "references": [{"name": "n", "subject": "nope", "version": 1}]});
    let (status, body) = call(
        &registry,
        "POST",
        "/subjects/c-value/versions",
        Some(bad_ref),
    )
    .await;
    assert_eq!((status, &body["error_code"]), (422, &json!(42201)));
    let guid = registry.guid_of(2).unwrap();
    let (_, by_guid) = call(&registry, "GET", &format!("/schemas/guids/{guid}"), None).await;
    assert_eq!(
        (&by_guid["schema"], &by_guid["guid"]),
        (&json!("\"long\""), &json!(guid))
    );
    assert_eq!(registry.requests(), 2, "GET /schemas/… only");
}

#[tokio::test]
async fn faults_answer_503_and_401() {
    let registry = TestRegistry::start().await;
    registry.register("a-value", "AVRO", "\"int\"", json!([]));
    registry.set_unavailable(Duration::from_millis(300));
    assert_eq!(call(&registry, "GET", "/schemas/ids/1", None).await.0, 503);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(call(&registry, "GET", "/schemas/ids/1", None).await.0, 200);
    registry.require_basic("u", "p");
    assert_eq!(call(&registry, "GET", "/schemas/ids/1", None).await.0, 401);
    assert_eq!(registry.requests(), 3);
}

#[tokio::test]
async fn a_protobuf_descriptor_is_answered_as_proto_text() {
    // message M { string s = 1; } in file m.proto, proto3, as a base64 descriptor.
    let descriptor = "CgdtLnByb3RvIg4KAU0SCQoBcxgBIAEoCWIGcHJvdG8z";
    let registry = TestRegistry::start().await;
    let id = registry.register("m-value", "PROTOBUF", descriptor, json!([]));
    let (_, body) = call(&registry, "GET", &format!("/schemas/ids/{id}"), None).await;
    assert_eq!(
        body["schema"],
        json!("syntax = \"proto3\";\n\nmessage M {\n  string s = 1;\n}\n")
    );
    assert_eq!(body["schemaType"], json!("PROTOBUF"));
    let (_, body) = call(
        &registry,
        "GET",
        &format!("/schemas/ids/{id}?format=serialized"),
        None,
    )
    .await;
    assert_eq!(body["schema"], json!(descriptor));
    // The same schema as text is the same schema.
    let text = "syntax = \"proto3\";\n\nmessage M {\n  string s = 1;\n}\n";
    assert_eq!(
        registry.register("m-value", "PROTOBUF", text, json!([])),
        id
    );
}

#[test]
fn guids_are_version_4_and_base64_is_standard() {
    let guid = random_guid();
    assert_eq!(guid.len(), 36);
    assert_eq!(guid.get(14..15), Some("4"));
    assert!(
        matches!(guid.get(19..20), Some("8" | "9" | "a" | "b")),
        "{guid}"
    );
    assert_eq!(base64(b"user:pass"), "dXNlcjpwYXNz");
    assert_eq!(base64(b"ab"), "YWI=");
    assert_eq!(base64(b"a"), "YQ==");
    assert_eq!(base64(b""), "");
}
