//! The Debian package's definition, checked where `cargo test` runs (the package itself is built
//! and checked unpacked by `.ci/run`: packaging/build-deb, packaging/check-deb): every asset
//! Cargo.toml names exists, the units point at the packaged paths, the maintainer scripts create
//! the user and never enable or start anything, the changelog's version is the crate's, and the
//! release profile ships no debug info.
use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn manifest() -> toml::Table {
    std::fs::read_to_string(root().join("Cargo.toml"))
        .unwrap()
        .parse()
        .unwrap()
}

fn deb_metadata() -> toml::Table {
    manifest()["package"]["metadata"]["deb"]
        .as_table()
        .expect("[package.metadata.deb]")
        .clone()
}

/// Files matching `pattern` (a path with at most one `*` in its last component).
fn matching(pattern: &str) -> Vec<String> {
    let path = root().join(pattern);
    let name = path.file_name().unwrap().to_str().unwrap().to_string();
    let Some((prefix, suffix)) = name.split_once('*') else {
        return if path.exists() {
            vec![pattern.to_string()]
        } else {
            Vec::new()
        };
    };
    let dir = path.parent().unwrap();
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n.starts_with(prefix) && n.ends_with(suffix) && n.len() >= name.len() - 1
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn every_packaged_source_file_exists() {
    let assets = deb_metadata()["assets"].as_array().unwrap().clone();
    assert!(assets.len() > 10);
    for asset in &assets {
        let fields = asset.as_array().unwrap();
        let source = fields[0].as_str().unwrap();
        let target = fields[1].as_str().unwrap();
        assert!(
            !target.starts_with("etc"),
            "{source} -> /{target}: the package ships nothing under /etc (no policy, no secrets)"
        );
        if source.starts_with("target/") {
            // Built by packaging/build-deb before packaging/assemble-deb.
            continue;
        }
        assert!(
            !matching(source).is_empty(),
            "Cargo.toml packages {source}, which matches no file"
        );
    }
    for (key, required) in [
        ("maintainer-scripts", "packaging/debian/"),
        ("changelog", "packaging/debian/changelog"),
    ] {
        assert_eq!(deb_metadata()[key].as_str(), Some(required));
    }
    let build = std::fs::read_to_string(root().join("packaging/build-deb")).unwrap();
    for generated in [
        "man \"$out/man\"",
        "completions bash",
        "completions zsh",
        "completions fish",
    ] {
        assert!(
            build.contains(generated),
            "build-deb does not generate {generated}"
        );
    }
}

#[test]
fn the_units_point_at_the_packaged_binary_and_docs_and_need_a_policy() {
    let packaged_docs: Vec<String> = deb_metadata()["assets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_array().unwrap()[0].as_str().unwrap().to_string())
        .collect();
    assert!(packaged_docs.contains(&"docs/*.md".to_string()));
    for unit in ["verbd.service", "verbd.socket", "verbd-approve.socket"] {
        let text = std::fs::read_to_string(root().join("systemd").join(unit)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines.contains(&"Documentation=file:/usr/share/doc/verbd/systemd.md"),
            "{unit}"
        );
        assert!(
            lines.contains(&"ConditionPathExists=/etc/verbd/policy.toml"),
            "{unit} must not start without a policy"
        );
        if unit == "verbd.service" {
            assert!(
                lines.contains(&"ExecStart=/usr/bin/verbd serve --policy /etc/verbd/policy.toml")
            );
            for kept in [
                "PrivateNetwork=yes",
                "RestrictAddressFamilies=AF_UNIX",
                "IPAddressDeny=any",
            ] {
                assert!(lines.contains(&kept), "verbd.service lost {kept}");
            }
        }
    }
}

#[test]
fn maintainer_scripts_create_the_user_and_start_nothing() {
    let dir = root().join("packaging/debian");
    let postinst = std::fs::read_to_string(dir.join("postinst")).unwrap();
    assert!(postinst.contains("systemd-sysusers /usr/lib/sysusers.d/verbd.conf"));
    assert!(postinst.contains("systemd-tmpfiles --create /usr/lib/tmpfiles.d/verbd.conf"));
    for script in ["postinst", "prerm", "postrm"] {
        let path = dir.join(script);
        let status = Command::new("sh").arg("-n").arg(&path).status().unwrap();
        assert!(status.success(), "{script}: syntax error");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("#!/bin/sh\n"), "{script}");
        for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
            for forbidden in [
                "systemctl enable",
                "systemctl start",
                "systemctl restart",
                "deb-systemd-helper enable",
                "deb-systemd-invoke start",
                "deb-systemd-invoke restart",
            ] {
                assert!(
                    !line.contains(forbidden),
                    "{script} would start or enable: {line}"
                );
            }
        }
        let mode = std::os::unix::fs::PermissionsExt::mode(&path.metadata().unwrap().permissions());
        assert_eq!(mode & 0o111, 0o111, "{script} must be executable");
    }
}

#[test]
fn the_changelog_names_the_crate_version_and_the_release_profile_has_no_debug_info() {
    let manifest = manifest();
    let version = manifest["package"]["version"].as_str().unwrap();
    let changelog = std::fs::read_to_string(root().join("packaging/debian/changelog")).unwrap();
    assert!(
        changelog.starts_with(&format!("verbd ({version}-1) ")),
        "packaging/debian/changelog must start with verbd ({version}-1)"
    );
    let release = manifest["profile"]["release"].as_table().unwrap();
    assert_eq!(release["debug"].as_bool(), Some(false));
    assert_eq!(release["strip"].as_bool(), Some(true));
}

/// The package names a maintainer people can write to: a name and an address in a real
/// top-level domain, not a placeholder (`.example`, `.invalid`, a no-reply address), and the
/// changelog is signed by the same maintainer (lintian compares them).
#[test]
fn the_maintainer_is_a_real_address_and_signs_the_changelog() {
    let maintainer = deb_metadata()["maintainer"].as_str().unwrap().to_string();
    let (name, address) = maintainer
        .strip_suffix('>')
        .and_then(|m| m.split_once(" <"))
        .unwrap_or_else(|| panic!("maintainer {maintainer:?} is not `Name <address>`"));
    assert!(!name.trim().is_empty(), "{maintainer}");
    let (local, domain) = address.split_once('@').expect("an address with @");
    assert!(!local.is_empty() && domain.contains('.'), "{maintainer}");
    let tld = domain.rsplit('.').next().unwrap();
    for placeholder in [
        "example",
        "invalid",
        "test",
        "localhost",
        "local",
        "localdomain",
    ] {
        assert_ne!(tld, placeholder, "{maintainer}: a reserved domain");
    }
    for placeholder in ["noreply", "no-reply", "example", "placeholder", "seed"] {
        assert!(
            !address.to_lowercase().contains(placeholder),
            "{maintainer}: looks like a placeholder ({placeholder})"
        );
    }
    let changelog = std::fs::read_to_string(root().join("packaging/debian/changelog")).unwrap();
    for signature in changelog.lines().filter(|l| l.starts_with(" -- ")) {
        assert!(
            signature.starts_with(&format!(" -- {maintainer}  ")),
            "changelog signed by someone else: {signature}"
        );
    }
}
