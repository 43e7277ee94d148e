//! `sluice plugin new|build|test`.

use super::{Language, OutputFormat, PluginAction};
use crate::config;
use crate::server::{EXIT_FAILURE, EXIT_INVALID};

pub fn plugin(action: PluginAction) -> u8 {
    use sluice_transform::{EngineOptions, Limits, PluginSpec, TransformEngine};
    match action {
        PluginAction::New { name, dir, lang } => {
            match sluice_transform::scaffold_plugin(&name, &dir, lang.into()) {
                Ok(created) => {
                    let code = match lang {
                        Language::Rust => "src/lib.rs",
                        Language::Python => "plugin.py",
                        Language::Js => "plugin.js",
                    };
                    println!(
                        "created {}: write your transform in {code}, then `sluice plugin build {}`",
                        created.display(),
                        created.display()
                    );
                    0
                }
                Err(e) => {
                    eprintln!("{e}");
                    EXIT_INVALID
                }
            }
        }
        PluginAction::Build { dir } => match sluice_transform::build_plugin(&dir) {
            Ok(wasm) => {
                println!("{}", wasm.display());
                0
            }
            Err(e) => {
                eprintln!("{e}");
                EXIT_FAILURE
            }
        },
        PluginAction::Test {
            plugin,
            input,
            config,
            timeout,
            memory,
            format,
        } => {
            let mut entries = std::collections::BTreeMap::new();
            for entry in &config {
                let Some((key, value)) = entry.split_once('=') else {
                    eprintln!("--config {entry}: write key=value");
                    return EXIT_INVALID;
                };
                entries.insert(key.to_string(), value.to_string());
            }
            let (timeout, memory) = match (
                config::units::parse_duration(&timeout),
                config::units::parse_size(&memory),
            ) {
                (Ok(t), Ok(m)) => match (
                    config::check_plugin_timeout(t),
                    config::check_plugin_memory(m),
                ) {
                    (Ok(()), Ok(())) => (t, m),
                    (Err(e), _) => {
                        eprintln!("--timeout: {e}");
                        return EXIT_INVALID;
                    }
                    (_, Err(e)) => {
                        eprintln!("--memory: {e}");
                        return EXIT_INVALID;
                    }
                },
                (Err(e), _) => {
                    eprintln!("--timeout: {e}");
                    return EXIT_INVALID;
                }
                (_, Err(e)) => {
                    eprintln!("--memory: {e}");
                    return EXIT_INVALID;
                }
            };
            let name = plugin
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "plugin".into());
            let spec = PluginSpec {
                name,
                path: plugin,
                config: entries,
                limits: Limits {
                    memory_bytes: memory,
                    timeout,
                    ..Limits::default()
                },
            };
            let result = TransformEngine::new(EngineOptions::default())
                .and_then(|engine| sluice_transform::test_plugin(&engine, &spec, &input));
            match result {
                Ok(cases) => {
                    for case in &cases {
                        match format {
                            OutputFormat::Text => println!("{case}"),
                            OutputFormat::Json => println!("{}", case.to_json()),
                        }
                    }
                    0
                }
                Err(e) => {
                    eprintln!("{e}");
                    EXIT_FAILURE
                }
            }
        }
    }
}
