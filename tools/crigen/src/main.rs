//! crigen: the one place where atoll's CRI code is made.
//!
//! `crigen generate [--check]` compiles `proto/cri.proto` with protox (a pure-Rust protobuf
//! compiler, so no system `protoc` is needed) and writes prost's output to
//! `src/cri/runtime.v1.rs`. With `--check` it writes nothing and fails if the checked-in file
//! differs from what the proto produces.
//!
//! `crigen check-upstream FILE` compares `proto/cri.proto` with an upstream CRI v1
//! `api.proto`: every message, field, enum value and RPC atoll declares must exist upstream
//! with the same number, type and cardinality. Run it whenever the proto is edited.

use prost_types::field_descriptor_proto::Label;
use prost_types::{DescriptorProto, EnumDescriptorProto, FileDescriptorProto, FileDescriptorSet};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const PROTO: &str = "proto/cri.proto";
const OUTPUT: &str = "src/cri/runtime.v1.rs";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = repo_root();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["generate"] => generate(&root, false),
        ["generate", "--check"] => generate(&root, true),
        ["check-upstream", file] => check_upstream(&root, Path::new(file)),
        _ => Err("usage: crigen generate [--check] | crigen check-upstream UPSTREAM_API_PROTO".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("crigen: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The atoll repository: two levels above this tool's manifest.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn compile(file: &Path) -> Result<FileDescriptorSet, String> {
    let dir = file.parent().ok_or("proto path has no parent")?;
    let name = file.file_name().ok_or("proto path has no file name")?;
    protox::compile([name], [dir]).map_err(|e| format!("{}: {e}", file.display()))
}

fn generate(root: &Path, check: bool) -> Result<(), String> {
    let fds = compile(&root.join(PROTO))?;
    let tmp = std::env::temp_dir().join(format!("crigen-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
    let mut config = prost_build::Config::new();
    config
        .out_dir(&tmp)
        // Registry credentials must never reach a log through `{:?}`; atoll writes its own
        // redacting Debug for this message.
        .skip_debug([".runtime.v1.AuthConfig"]);
    config.compile_fds(fds).map_err(|e| format!("prost-build: {e}"))?;
    let produced = std::fs::read(tmp.join("runtime.v1.rs")).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&tmp);
    let target = root.join(OUTPUT);
    if check {
        let current = std::fs::read(&target).map_err(|e| format!("{}: {e}", target.display()))?;
        if current != produced {
            return Err(format!(
                "{OUTPUT} is not what {PROTO} produces; run `cargo run --manifest-path tools/crigen/Cargo.toml -- generate`"
            ));
        }
        println!("{OUTPUT} is up to date");
    } else {
        std::fs::write(&target, produced).map_err(|e| format!("{}: {e}", target.display()))?;
        println!("wrote {OUTPUT}");
    }
    Ok(())
}

/// Flattened view of a proto file: message name → fields, enum name → values,
/// method name → signature, each described as a comparable string.
#[derive(Default)]
struct Shape {
    messages: BTreeMap<String, BTreeMap<String, String>>,
    enums: BTreeMap<String, BTreeMap<String, i32>>,
    methods: BTreeMap<String, String>,
}

fn shape(file: &FileDescriptorProto) -> Shape {
    let mut s = Shape::default();
    for m in &file.message_type {
        add_message(&mut s, "", m);
    }
    for e in &file.enum_type {
        add_enum(&mut s, "", e);
    }
    for svc in &file.service {
        for m in &svc.method {
            s.methods.insert(
                format!("{}.{}", svc.name(), m.name()),
                format!(
                    "({}{}) -> ({}{})",
                    if m.client_streaming() { "stream " } else { "" },
                    m.input_type(),
                    if m.server_streaming() { "stream " } else { "" },
                    m.output_type()
                ),
            );
        }
    }
    s
}

fn add_message(s: &mut Shape, prefix: &str, m: &DescriptorProto) {
    let name = format!("{prefix}{}", m.name());
    let fields = m
        .field
        .iter()
        .map(|f| {
            let label = if f.label() == Label::Repeated { "repeated " } else { "" };
            let ty = if f.type_name().is_empty() { format!("{:?}", f.r#type()) } else { f.type_name().to_string() };
            (f.name().to_string(), format!("{label}{ty} = {}", f.number()))
        })
        .collect();
    s.messages.insert(name.clone(), fields);
    for nested in &m.nested_type {
        add_message(s, &format!("{name}."), nested);
    }
    for e in &m.enum_type {
        add_enum(s, &format!("{name}."), e);
    }
}

fn add_enum(s: &mut Shape, prefix: &str, e: &EnumDescriptorProto) {
    let values = e.value.iter().map(|v| (v.name().to_string(), v.number())).collect();
    s.enums.insert(format!("{prefix}{}", e.name()), values);
}

fn check_upstream(root: &Path, upstream: &Path) -> Result<(), String> {
    let ours = compile(&root.join(PROTO))?;
    let theirs = compile(upstream)?;
    let ours = shape(ours.file.last().ok_or("no file compiled")?);
    let theirs = shape(theirs.file.last().ok_or("no file compiled")?);
    let mut problems = Vec::new();
    let mut checked = 0usize;
    for (msg, fields) in &ours.messages {
        let Some(up) = theirs.messages.get(msg) else {
            problems.push(format!("message {msg} does not exist upstream"));
            continue;
        };
        for (field, desc) in fields {
            checked += 1;
            match up.get(field) {
                None => problems.push(format!("{msg}.{field} does not exist upstream")),
                Some(u) if u != desc => problems.push(format!("{msg}.{field}: ours `{desc}`, upstream `{u}`")),
                Some(_) => {}
            }
        }
    }
    for (en, values) in &ours.enums {
        let Some(up) = theirs.enums.get(en) else {
            problems.push(format!("enum {en} does not exist upstream"));
            continue;
        };
        for (value, number) in values {
            checked += 1;
            if up.get(value) != Some(number) {
                problems.push(format!("{en}.{value} = {number}: upstream has {:?}", up.get(value)));
            }
        }
    }
    for (method, sig) in &ours.methods {
        checked += 1;
        match theirs.methods.get(method) {
            Some(u) if u == sig => {}
            other => problems.push(format!("rpc {method} {sig}: upstream has {other:?}")),
        }
    }
    if problems.is_empty() {
        println!(
            "{PROTO} matches {}: {} messages, {} enums, {} rpcs, {checked} items checked",
            upstream.display(),
            ours.messages.len(),
            ours.enums.len(),
            ours.methods.len()
        );
        Ok(())
    } else {
        Err(format!("{} mismatches:\n  {}", problems.len(), problems.join("\n  ")))
    }
}
