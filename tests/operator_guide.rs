//! docs/operator-guide.md stays true: its configuration reference parses with Quiver's own
//! parser (which refuses unknown keys), shows every section, and every `quiver ctl` command it
//! recommends exists.

use std::path::Path;
use std::process::Command;

fn guide() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/operator-guide.md"))
        .unwrap()
}

/// The guide's one TOML block.
fn reference(text: &str) -> &str {
    let start = text.find("```toml\n").expect("a toml block") + "```toml\n".len();
    let len = text[start..].find("```").expect("the block's end");
    &text[start..start + len]
}

#[test]
fn the_configuration_reference_parses_and_covers_every_section() {
    let text = guide();
    let block = reference(&text);
    let c = quiver::Config::parse(block).unwrap_or_else(|e| panic!("the reference: {e}"));
    assert_eq!(c.port.len(), 5, "one port of each type");
    for section in [
        "[dataplane]",
        "[buffers]",
        "[stats]",
        "[demo]",
        "[dpdk]",
        "[metrics]",
        "[[port]]",
        "[[xconnect]]",
        "[[address]]",
        "[[route]]",
        "[[neighbor]]",
        "[[vxlan]]",
        "[[table]]",
        "[[wireguard]]",
    ] {
        assert!(block.contains(section), "the reference lacks {section}");
    }
    // The parser it relies on does refuse what is not a key.
    let misspelt = block.replace("ring_size", "rign_size");
    assert!(quiver::Config::parse(&misspelt).is_err());
}

#[test]
fn every_quiver_ctl_command_it_recommends_exists() {
    let text = guide();
    let mut checked = 0;
    for cmd in text.split('`').filter(|s| s.starts_with("quiver ctl ")) {
        // `--help` after the command's words: clap accepts it only for a command that exists
        // (an unknown subcommand is an error before help is printed).
        let words: Vec<&str> = cmd
            .split_whitespace()
            .skip(2)
            .take_while(|w| !w.starts_with('-') && !w.starts_with('/'))
            .collect();
        let out = Command::new(env!("CARGO_BIN_EXE_quiver"))
            .arg("ctl")
            .args(&words)
            .arg("--help")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "`{cmd}`: quiver ctl {} does not exist: {}",
            words.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} commands found in the guide");
}
