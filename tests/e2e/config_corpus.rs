//! `sluice validate` over a corpus of broken files: each exits 2, names the path of its
//! problem on stderr, and none panics. The first line of each file says what stderr must
//! contain: `# expect: <text>`. Good files (`good_*.yaml`, the default `connectors.yaml`,
//! the examples in `docs/examples`) exit 0. No output of any of them shows a secret: the
//! corpus spells its secrets `hunter2…`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Every secret in the corpus contains this.
const SECRET: &str = "hunter2";

fn assert_no_secret(path: &Path, stdout: &str, stderr: &str) {
    assert!(
        !stdout.contains(SECRET) && !stderr.contains(SECRET),
        "{}: a secret is shown:\n{stdout}\n{stderr}",
        path.display()
    );
}

fn corpus_files(prefix: &str) -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/config_corpus");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("corpus dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .collect();
    files.sort();
    files
}

fn validate(path: &Path) -> (Option<i32>, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["validate", "--config"])
        .arg(path)
        .env("SLUICE_CORPUS_SET", "set")
        // For the examples in docs/examples; a secret from the environment never prints.
        .env("KAFKA_USER", "app")
        .env("KAFKA_PASSWORD", "hunter2-from-the-environment")
        // For examples/avro-orders: a registry that is not there is a warning only.
        .env("SCHEMA_REGISTRY_URL", "http://127.0.0.1:9")
        .env_remove("SLUICE_CORPUS_UNSET")
        .output()
        .expect("run sluice validate");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn broken_files_exit_2_and_name_the_path() {
    let broken = corpus_files("bad_");
    assert!(broken.len() >= 15, "corpus too small: {}", broken.len());
    let mut failures = Vec::new();
    for path in &broken {
        let text = std::fs::read_to_string(path).expect("read corpus file");
        let expect = text
            .lines()
            .next()
            .and_then(|l| l.strip_prefix("# expect: "))
            .unwrap_or_else(|| panic!("{} lacks `# expect:`", path.display()))
            .trim()
            .to_string();
        let (code, stdout, stderr) = validate(path);
        assert_no_secret(path, &stdout, &stderr);
        if code != Some(2) || !stderr.contains(&expect) || stderr.contains("panicked") {
            failures.push(format!(
                "{}: exit {code:?}, expected stderr to contain {expect:?}, got:\n{stderr}",
                path.display()
            ));
        }
        for line in stderr.lines() {
            assert!(
                line.starts_with(&path.display().to_string()),
                "each problem line names the file: {line}"
            );
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The configuration files users start from: `docs/examples/*.yaml` and every
/// `examples/*/connectors*.yaml`.
fn example_configs(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("docs/examples"))
        .expect("docs/examples")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    for dir in std::fs::read_dir(root.join("examples")).expect("examples") {
        let dir = dir.expect("entry").path();
        if !dir.is_dir() {
            continue;
        }
        files.extend(
            std::fs::read_dir(&dir)
                .expect("example dir")
                .map(|e| e.expect("entry").path())
                .filter(|p| {
                    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
                    name.starts_with("connectors") && name.ends_with(".yaml")
                }),
        );
    }
    files.sort();
    files
}

#[test]
fn good_files_exit_0_with_a_summary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut good = vec![root.join("connectors.yaml")];
    good.extend(corpus_files("good_"));
    let examples = example_configs(&root);
    assert!(examples.len() >= 4, "{examples:?}");
    good.extend(examples);
    assert!(good.len() >= 5, "{good:?}");
    for path in &good {
        let (code, stdout, stderr) = validate(path);
        assert_eq!(code, Some(0), "{}: {stderr}", path.display());
        assert!(stdout.contains("valid"), "{stdout}");
        assert_no_secret(path, &stdout, &stderr);
    }
}

#[test]
fn good_files_name_their_schema_for_editors() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = vec![root.join("connectors.yaml")];
    files.extend(example_configs(&root));
    for path in files {
        let text = std::fs::read_to_string(&path).expect("read");
        let first = text.lines().next().unwrap_or_default();
        let schema = first
            .strip_prefix("# yaml-language-server: $schema=")
            .unwrap_or_else(|| panic!("{}: first line is {first:?}", path.display()));
        let schema = path.parent().expect("dir").join(schema);
        assert!(
            schema.ends_with("connectors.schema.json") && schema.is_file(),
            "{}: {} is not the schema",
            path.display(),
            schema.display()
        );
    }
}

#[test]
fn secrets_are_redacted_in_the_summary() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/config_corpus/good_secrets.yaml");
    let (code, stdout, stderr) = validate(&path);
    assert_eq!(code, Some(0), "{stderr}");
    assert_no_secret(&path, &stdout, &stderr);
    for shown in [
        "sasl.password=***",
        "sasl.username=app",
        "postgres://app:***@localhost:5432/test?sslmode=require",
        "?sslkey=/etc/sluice/key.pem&sslpassword=***&password=***",
    ] {
        assert!(stdout.contains(shown), "{shown} not in {stdout}");
    }
}

#[test]
fn values_from_the_environment_show_as_written_in_the_summary() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/config_corpus/good_env_values.yaml");
    let (code, stdout, stderr) = validate(&path);
    assert_eq!(code, Some(0), "{stderr}");
    assert_no_secret(&path, &stdout, &stderr);
    for shown in [
        "kafka: ${SLUICE_CORPUS_UNSET:-localhost:9092}",
        "sasl.password=${KAFKA_PASSWORD}",
        "client.id=${SLUICE_CORPUS_UNSET:-00123}",
        "sasl.username=app",
        "postgres://app:${KAFKA_PASSWORD}@localhost:5432/test?sslmode=require",
        "2 task(s)",
    ] {
        assert!(stdout.contains(shown), "{shown} not in {stdout}");
    }
}

#[test]
fn missing_file_and_bad_usage_exit_2() {
    let (code, _, stderr) = validate(Path::new("/nonexistent/connectors.yaml"));
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("cannot read /nonexistent/connectors.yaml"),
        "{stderr}"
    );
    let status = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("frobnicate")
        .output()
        .expect("run");
    assert_eq!(status.status.code(), Some(2));
}

/// The Markdown pages users read: the README and every page under `docs/`.
fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("docs dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages
}

/// The fenced blocks of `text` marked as whole connector files (```` ```yaml sluice ````):
/// (the line the block starts on, its text).
fn connector_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, String)> = None;
    for (number, line) in text.lines().enumerate() {
        match &mut open {
            None if line.trim() == "```yaml sluice" => open = Some((number + 1, String::new())),
            None => {}
            Some(_) if line.trim() == "```" => blocks.extend(open.take()),
            Some((_, block)) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    blocks
}

/// Every connector file the README and the docs show (a fenced block marked
/// `yaml sluice`) validates as it is, with the environment the pages name
/// (`DATABASE_URL`, the registry's credentials, the admin token).
#[test]
fn connector_files_in_the_docs_validate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = tempfile::tempdir().expect("dir");
    let mut checked = Vec::new();
    let mut failures = Vec::new();
    for page in pages(&root) {
        let text = std::fs::read_to_string(&page).expect("page");
        for (line, block) in connector_blocks(&text) {
            let name = page
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let file = dir.path().join(format!("{name}-{line}.yaml"));
            std::fs::write(&file, &block).expect("write block");
            let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
                .args(["validate", "--config"])
                .arg(&file)
                .env("DATABASE_URL", "postgres://app@127.0.0.1:5432/app")
                .env("REGISTRY_USER", "app")
                .env("REGISTRY_PASSWORD", "registry-password")
                .env("SLUICE_ADMIN_TOKEN", "a-token-of-24-characters")
                .env("KAFKA_USER", "app")
                .env("KAFKA_PASSWORD", "kafka-password")
                .env_remove("KAFKA_BROKERS")
                .output()
                .expect("run sluice validate");
            let (code, stderr) = (
                output.status.code(),
                String::from_utf8_lossy(&output.stderr).into_owned(),
            );
            let at = format!("{}:{line}", page.display());
            if code != Some(0) {
                failures.push(format!("{at}: exit {code:?}\n{stderr}"));
            }
            checked.push(at);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The README's, getting-started's and coming-from-kafka-connect's at least.
    assert!(checked.len() >= 4, "{checked:?}");
    assert!(
        checked.iter().any(|c| c.contains("README.md")),
        "{checked:?}"
    );
}

#[test]
fn connector_blocks_are_found_and_others_are_not() {
    let text = "a\n```yaml sluice\nkafka: {}\n```\n```yaml\nnot: this\n```\n```yaml sluice\nb: 1\nc: 2\n```\n";
    assert_eq!(
        connector_blocks(text),
        [
            (2, "kafka: {}\n".to_string()),
            (8, "b: 1\nc: 2\n".to_string())
        ]
    );
}
