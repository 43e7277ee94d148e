//! The imports a Confluent producer may use without registering them: the Protobuf
//! well-known types (`google/protobuf/*.proto`, which protox ships), Confluent's own
//! `confluent/meta.proto` and `confluent/type/decimal.proto`, and `google/type/date.proto`
//! (which Confluent's registry also resolves by itself). The Confluent files are written
//! here as Confluent's schema-registry repository defines them, so a schema that imports
//! them compiles without the registry holding a copy.

/// `confluent/meta.proto`: the `confluent.Meta` option (`doc`, `params`, `tags`) that the
/// Confluent serializers read, e.g. `[(confluent.field_meta).params = {key: "precision",
/// value: "10"}]` on a `confluent.type.Decimal` field.
pub const CONFLUENT_META: &str = r#"syntax = "proto3";
package confluent;

import "google/protobuf/descriptor.proto";

option go_package = "github.com/confluentinc/schema-registry/confluent/meta";
option java_package = "io.confluent.protobuf";
option java_outer_classname = "MetaProto";

message Meta {
  string doc = 1;
  map<string, string> params = 2;
  repeated string tags = 3;
}

extend google.protobuf.FileOptions {
  Meta file_meta = 1088;
}
extend google.protobuf.MessageOptions {
  Meta message_meta = 1088;
}
extend google.protobuf.FieldOptions {
  Meta field_meta = 1088;
}
extend google.protobuf.EnumOptions {
  Meta enum_meta = 1088;
}
extend google.protobuf.EnumValueOptions {
  Meta enum_value_meta = 1088;
}
"#;

/// `confluent/type/decimal.proto`: an exact decimal as its unscaled big-endian two's
/// complement bytes, with its precision and scale.
pub const CONFLUENT_DECIMAL: &str = r#"syntax = "proto3";
package confluent.type;

option go_package = "github.com/confluentinc/schema-registry/confluent/type/decimal";
option java_package = "io.confluent.protobuf.type";
option java_outer_classname = "DecimalProto";

message Decimal {
  bytes value = 1;
  uint32 precision = 2;
  int32 scale = 3;
}
"#;

/// `google/type/date.proto` (from Google's common types): a calendar date.
pub const GOOGLE_TYPE_DATE: &str = r#"syntax = "proto3";
package google.type;

option java_package = "com.google.type";
option java_outer_classname = "DateProto";

message Date {
  int32 year = 1;
  int32 month = 2;
  int32 day = 3;
}
"#;

/// The source of a built-in import, by its import path.
pub fn source(name: &str) -> Option<&'static str> {
    match name {
        "confluent/meta.proto" => Some(CONFLUENT_META),
        "confluent/type/decimal.proto" => Some(CONFLUENT_DECIMAL),
        "google/type/date.proto" => Some(GOOGLE_TYPE_DATE),
        _ => None,
    }
}
