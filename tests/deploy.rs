//! `deploy/`: the Kubernetes manifests validate against Kubernetes' schemas (strict: an unknown
//! field fails), rendered as kustomize renders them, and the quiver.toml each ConfigMap carries
//! loads with Quiver's own parser. `kubernetes-validate` comes from PyPI into a virtual
//! environment under the target directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use testkit::{require, Needs, SYSTEM_PYTHON as PYTHON};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy")
}

/// A virtual environment with kubernetes-validate, made once per target directory.
fn venv_python() -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("kubernetes-validate-venv");
    testkit::python_venv(&venv, &["kubernetes-validate==1.37.0", "pyyaml==6.0.4"])
        .unwrap_or_else(|e| panic!("{e}"))
}

fn check(out: std::io::Result<Output>) -> Output {
    let out = out.expect("spawn");
    assert!(
        out.status.success(),
        "failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn validate(python: &Path, deploy: &Path, out_dir: &Path) -> Output {
    Command::new(python)
        .arg(deploy.join("validate.py"))
        .arg(out_dir)
        .output()
        .expect("spawn validate.py")
}

#[test]
fn the_manifests_validate_and_their_configs_load() {
    if !require(
        "the_manifests_validate_and_their_configs_load",
        &Needs {
            tools: &[PYTHON],
            ..Needs::default()
        },
    ) {
        return;
    }
    let python = venv_python();
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("deploy-configs");
    let out = check(Ok(validate(&python, &deploy_dir(), &out_dir)));
    let text = String::from_utf8_lossy(&out.stdout);
    for rendered in [
        "base: DaemonSet/forwarder-quiver valid",
        "overlays/dpdk: DaemonSet/forwarder-quiver valid",
        "overlays/nsm-compat: DaemonSet/forwarder-quiver valid",
        "base: pods labelled app=forwarder-quiver",
        // NSM's scripts find the forwarder by cmd-forwarder-vpp's label.
        "overlays/nsm-compat: pods labelled app=forwarder-vpp",
    ] {
        assert!(text.contains(rendered), "{text}");
    }
    quiver::Config::load(&out_dir.join("nsm-compat.toml")).unwrap();
    let base = quiver::Config::load(&out_dir.join("base.toml")).unwrap();
    assert!(
        base.port.is_empty(),
        "the base forwarder starts with no NIC"
    );
    let dpdk = quiver::Config::load(&out_dir.join("dpdk.toml")).unwrap();
    assert_eq!(
        dpdk.dpdk.pci.len(),
        1,
        "the overlay binds exactly its uplink"
    );

    // The validator is strict: a misspelt field in a copy of the manifests fails it.
    let copy = Path::new(env!("CARGO_TARGET_TMPDIR")).join("deploy-misspelt");
    let _ = std::fs::remove_dir_all(&copy);
    check(
        Command::new("cp")
            .arg("-r")
            .arg(deploy_dir())
            .arg(&copy)
            .output(),
    );
    let ds = copy.join("base/daemonset.yaml");
    let yaml = std::fs::read_to_string(&ds).unwrap();
    std::fs::write(&ds, yaml.replace("hostPID: true", "hostPid: true")).unwrap();
    let bad = validate(&python, &copy, &out_dir);
    assert!(!bad.status.success(), "a misspelt field passed validation");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("hostPid"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );

    // So is the selector check: pods the selector does not match are refused.
    std::fs::write(&ds, yaml).unwrap();
    let patch = copy.join("overlays/nsm-compat/daemonset-label.yaml");
    let text = std::fs::read_to_string(&patch).unwrap();
    let (head, tail) = text.rsplit_once("app: forwarder-vpp").unwrap();
    std::fs::write(&patch, format!("{head}app: forwarder-other{tail}")).unwrap();
    let bad = validate(&python, &copy, &out_dir);
    assert!(!bad.status.success(), "a selector matching no pod passed");
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("does not match"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let _ = std::fs::remove_dir_all(&copy);
}

/// The image's runtime stage installs, by name, the Debian package of every DPDK library the
/// `quiver` binary links (no docker daemon needed: the packages are looked up here, in the same
/// Debian release the image is built from).
#[cfg(feature = "dpdk")]
#[test]
fn the_image_installs_every_dpdk_library_quiver_links() {
    if !require(
        "the_image_installs_every_dpdk_library_quiver_links",
        &Needs {
            tools: &["/usr/bin/ldd", "/usr/bin/dpkg"],
            ..Needs::default()
        },
    ) {
        return;
    }
    let dockerfile =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile")).unwrap();
    let runtime = &dockerfile[dockerfile.rfind("\nFROM ").expect("a runtime stage")..];
    let ldd = check(
        Command::new("ldd")
            .arg(env!("CARGO_BIN_EXE_quiver"))
            .output(),
    );
    let mut libs = 0;
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        // "librte_eal.so.23 => /lib/x86_64-linux-gnu/librte_eal.so.23 (0x…)"
        let Some(path) = line.split(" => ").nth(1).and_then(|r| r.split(' ').next()) else {
            continue;
        };
        if !path.contains("librte_") {
            continue;
        }
        libs += 1;
        // dpkg knows the file under /usr/lib (Debian 12 merges /lib into /usr/lib).
        let usr = path.strip_prefix("/usr").unwrap_or(path);
        let out = check(
            Command::new("dpkg")
                .arg("-S")
                .arg(format!("/usr{usr}"))
                .output(),
        );
        let package = String::from_utf8_lossy(&out.stdout)
            .split(':')
            .next()
            .unwrap()
            .trim()
            .to_string();
        assert!(
            runtime.split_whitespace().any(|w| w == package),
            "{path} comes from {package}, which the Dockerfile's runtime stage does not install"
        );
    }
    assert!(
        libs >= 4,
        "quiver links {libs} DPDK libraries: built without DPDK?"
    );
}
