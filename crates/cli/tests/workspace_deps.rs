//! Workspace hygiene: a dependency two member crates share is declared
//! once, in `[workspace.dependencies]`, so its version and features cannot
//! drift apart between them.

use std::collections::BTreeMap;
use std::path::Path;

fn read(path: &Path) -> toml::Table {
    let src = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    toml::from_str(&src).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn shared_dependencies_come_from_the_workspace() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let ws = read(&root.join("Cargo.toml"));
    let workspace = &ws["workspace"];
    let inherited = workspace["dependencies"].as_table().unwrap();
    // Crate name -> the members that declare it themselves.
    let mut local: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for m in workspace["members"].as_array().unwrap() {
        let m = m.as_str().unwrap();
        let manifest = read(&root.join(m).join("Cargo.toml"));
        for section in ["dependencies", "dev-dependencies", "build-dependencies"] {
            let Some(deps) = manifest.get(section).and_then(|d| d.as_table()) else {
                continue;
            };
            for (name, spec) in deps {
                let from_ws = spec
                    .get("workspace")
                    .and_then(|w| w.as_bool())
                    .unwrap_or(false);
                if from_ws {
                    continue;
                }
                assert!(
                    !inherited.contains_key(name),
                    "{m} declares {name} itself although [workspace.dependencies] has it"
                );
                let who = local.entry(name.clone()).or_default();
                if !who.contains(&m.to_string()) {
                    who.push(m.to_string());
                }
            }
        }
    }
    let shared: Vec<String> = local
        .iter()
        .filter(|(_, who)| who.len() > 1)
        .map(|(name, who)| format!("{name} ({})", who.join(", ")))
        .collect();
    assert!(
        shared.is_empty(),
        "declared separately by several crates, move to [workspace.dependencies]: {shared:?}"
    );
}
