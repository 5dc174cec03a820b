//! `pktgen-scripts/`: the TRex profiles compile, the pktgen-dpdk Lua scripts parse, the Quiver
//! configurations beside them load, and the README lists exactly the files that are there.

use std::path::{Path, PathBuf};
use std::process::Command;

use testkit::{require, Needs};

fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("pktgen-scripts")
}

/// Files under `pktgen-scripts/<sub>` ending in `.<ext>`, sorted.
fn files(sub: &str, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(scripts_dir().join(sub))
        .unwrap_or_else(|e| panic!("pktgen-scripts/{sub}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    assert!(!v.is_empty(), "no .{ext} files in pktgen-scripts/{sub}");
    v
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn trex_profiles_compile() {
    if !require(
        "trex_profiles_compile",
        &Needs {
            tools: &["/usr/bin/python3"],
            ..Needs::default()
        },
    ) {
        return;
    }
    let cache = tempfile_dir("pycache");
    for profile in files("trex", "py") {
        // Compiled into a scratch directory: the source tree gets no __pycache__.
        run(Command::new("/usr/bin/python3")
            .env("PYTHONPYCACHEPREFIX", &cache)
            .args(["-m", "py_compile"])
            .arg(&profile));
        let text = std::fs::read_to_string(&profile).unwrap();
        assert!(
            text.contains("def register():") && text.contains("def get_streams("),
            "{} is not a TRex STL profile (register + get_streams)",
            profile.display()
        );
    }
    let _ = std::fs::remove_dir_all(cache);
}

#[test]
fn pktgen_lua_scripts_parse() {
    if !require(
        "pktgen_lua_scripts_parse",
        &Needs {
            tools: &["/usr/bin/luac"],
            ..Needs::default()
        },
    ) {
        return;
    }
    // One file per call: luac 5.4.4 double-frees when given several with -p.
    for script in files("pktgen", "lua") {
        run(Command::new("/usr/bin/luac").arg("-p").arg(&script));
    }
}

#[test]
fn testpmd_scenarios_are_valid_bash() {
    for script in files("testpmd", "sh") {
        run(Command::new("bash").arg("-n").arg(&script));
    }
}

#[test]
fn quiver_configurations_load() {
    let configs = files("quiver", "toml");
    for path in &configs {
        let c = quiver::Config::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(
            c.port.len() >= 2,
            "{}: fewer than two ports",
            path.display()
        );
    }
    let routing = quiver::Config::load(&scripts_dir().join("quiver/trex-routing.toml")).unwrap();
    assert_eq!(routing.route.len(), 2);
    assert_eq!(routing.neighbor.len(), 2);
    assert_eq!(routing.dpdk.pci.len(), 2, "DPDK binds only the listed NICs");
}

#[test]
fn the_readme_lists_every_script() {
    let readme = std::fs::read_to_string(scripts_dir().join("README.md")).unwrap();
    for (sub, ext) in [
        ("trex", "py"),
        ("pktgen", "lua"),
        ("testpmd", "sh"),
        ("quiver", "toml"),
    ] {
        for f in files(sub, ext) {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            assert!(readme.contains(&name), "README.md does not mention {name}");
        }
    }
}

fn tempfile_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("quiver-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
