//! The tag-rule recipes of `samples/README.md` pick what they say they pick: each recipe's
//! `tags:` block is read as an ImageWatch's `spec.tags`, the engine chooses among the tags of
//! its `Tags:` line, and the choice must be the one after `→ picks`.

use imagewatch_crd::TagRules;
use imagewatch_engine::policy::{TagInfo, TagPolicy};

/// One recipe: its title, its `tags:` YAML, the listed tags and the tag it says it picks.
#[derive(Debug)]
struct Recipe {
    title: String,
    yaml: String,
    tags: Vec<String>,
    picks: Option<String>,
}

fn samples_readme() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../samples/README.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The text of the `## Tag-rule recipes` section.
fn section(text: &str) -> &str {
    let start = text
        .find("\n## Tag-rule recipes")
        .expect("samples/README.md has no `## Tag-rule recipes` section");
    let rest = &text[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    &rest[..end]
}

/// The backticked words of `text`, in order.
fn backticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

fn recipes(section: &str) -> Vec<Recipe> {
    let mut out = Vec::new();
    for block in section.split("\n### ").skip(1) {
        let title = block.lines().next().unwrap_or_default().trim().to_owned();
        let yaml_start = block
            .find("```yaml\n")
            .unwrap_or_else(|| panic!("recipe {title:?} has no ```yaml block"));
        let body = &block[yaml_start + 8..];
        let yaml_end = body
            .find("```")
            .unwrap_or_else(|| panic!("recipe {title:?}: unterminated yaml block"));
        let yaml = body[..yaml_end].to_owned();
        let line = block
            .lines()
            .find(|l| l.starts_with("Tags:"))
            .unwrap_or_else(|| panic!("recipe {title:?} has no `Tags:` line"));
        let (listed, picked) = line
            .split_once('→')
            .unwrap_or_else(|| panic!("recipe {title:?}: no `→ picks` in {line:?}"));
        let picked = picked.trim();
        assert!(
            picked.starts_with("picks"),
            "recipe {title:?}: {line:?} does not say what it picks"
        );
        let picks = backticked(picked).into_iter().next();
        assert!(
            picks.is_some() || picked.contains("nothing"),
            "recipe {title:?}: {line:?} names no tag and not `nothing`"
        );
        out.push(Recipe {
            title,
            yaml,
            tags: backticked(listed),
            picks,
        });
    }
    out
}

#[test]
fn every_recipe_picks_the_tag_it_names() {
    let text = samples_readme();
    let recipes = recipes(section(&text));
    assert!(
        recipes.len() >= 7,
        "expected at least 7 recipes, found {}",
        recipes.len()
    );
    for recipe in recipes {
        let fragment: serde_json::Value = serde_saphyr::from_str(&recipe.yaml)
            .unwrap_or_else(|e| panic!("recipe {:?}: {e}\n{}", recipe.title, recipe.yaml));
        let rules: TagRules = serde_json::from_value(fragment["tags"].clone())
            .unwrap_or_else(|e| panic!("recipe {:?}: spec.tags: {e}", recipe.title));
        // A misspelt field would be ignored by serde: every key must come back.
        let known = serde_json::to_value(&rules).expect("serialize");
        for key in fragment["tags"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k)
        {
            assert!(
                known.get(key).is_some(),
                "recipe {:?}: spec.tags has no field {key:?}",
                recipe.title
            );
        }
        let policy = TagPolicy::from_rules(&rules)
            .unwrap_or_else(|e| panic!("recipe {:?}: {e}", recipe.title));
        assert!(
            recipe.tags.len() >= 3,
            "recipe {:?} lists too few tags to show a choice",
            recipe.title
        );
        let tags: Vec<TagInfo> = recipe.tags.iter().map(TagInfo::new).collect();
        let chosen = policy.select(&tags).map(|t| t.tag.clone());
        assert_eq!(
            chosen, recipe.picks,
            "recipe {:?} says it picks {:?} among {:?}",
            recipe.title, recipe.picks, recipe.tags
        );
    }
}

#[test]
fn the_parser_reads_a_recipe() {
    let section = "## Tag-rule recipes\n\n### Semantic versions\n\nText.\n\n```yaml\ntags:\n  pattern: \"semver:>=1\"\n```\n\nTags: `v1.0.0`, `v1.2.0`, `latest` → picks `v1.2.0`\n";
    let r = recipes(section);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].title, "Semantic versions");
    assert_eq!(r[0].tags, ["v1.0.0", "v1.2.0", "latest"]);
    assert_eq!(r[0].picks.as_deref(), Some("v1.2.0"));
}
