//! How `quiver ctl` prints what the admin API answered (a table or JSON) and its refusals.

/// Prints a JSON value, pretty.
pub fn print_json(v: &serde_json::Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    );
}

/// A refusal as the user reads it: `not found: no port named `x``.
pub fn status(s: quiver_admin_api::Status) -> String {
    use quiver_admin_api::Code;
    let code = match s.code() {
        Code::NotFound => "not found",
        Code::InvalidArgument => "invalid argument",
        Code::AlreadyExists => "already exists",
        Code::Unavailable => "unavailable",
        Code::Internal => "internal error",
        Code::Unimplemented => "not implemented by this quiver",
        _ => "error",
    };
    format!("{code}: {}", s.message())
}

/// Makes a change through `$client`; prints `{"ok": true}` when `$json`.
macro_rules! change {
    ($client:expr, $json:expr, $call:expr) => {{
        $client.block_on($call).map_err($crate::ctl::reply::status)?;
        if $json {
            $crate::ctl::reply::print_json(&serde_json::json!({ "ok": true }));
        }
    }};
}
pub(crate) use change;
