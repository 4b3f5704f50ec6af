//! Issue 29's item 19 as a user sees it: where each registered buffer sits (header, JSON,
//! report).

mod cmd;
use cmd::run as rdmaprobe;

/// The tests measure: one at a time (each pins its threads to the same CPUs).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("rdmaprobe-{name}-{}", std::process::id()))
}

/// ` MR direct.A: addr 0x..., page offset N, aligned ..., huge pages no, phys ...` for every
/// end of every backend, and the same fields in the JSON (`memory_regions`), which the report
/// renders as a table.
#[test]
fn lat_prints_and_records_where_each_buffer_sits() {
    let _g = serial();
    let json = temp("regions.json");
    let plots = temp("regions-plots");
    let (code, out, err) = rdmaprobe(&[
        "lat",
        "write",
        "--loopback",
        "-d",
        "model0",
        "-n",
        "200",
        "--json",
        json.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    let backends = cmd::model0_backends();
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let regions = doc["memory_regions"].as_array().expect("memory_regions in the JSON");
    assert_eq!(regions.len(), 2 * backends.len(), "{regions:?}");
    for k in &backends {
        for end in ["A", "B"] {
            let name = format!("{k}.{end}");
            let r = regions
                .iter()
                .find(|r| r["name"] == name.as_str())
                .unwrap_or_else(|| panic!("{name} in {regions:?}"));
            let addr = r["addr"].as_u64().unwrap();
            let (off, align) = (r["page_offset"].as_u64().unwrap(), r["align"].as_u64().unwrap());
            assert_eq!(off, addr % 4096, "{r}");
            assert!(
                align.is_power_of_two() && addr % align == 0 && (addr / align) % 2 == 1,
                "{r}"
            );
            assert_eq!(r["huge"].as_bool(), Some(false), "{r}");
            let phys = match (r["phys_addr"].as_u64(), r["phys_unreadable"].as_str()) {
                (Some(p), None) => {
                    assert_eq!(p % 4096, off, "the physical address keeps the page offset: {r}");
                    format!("{p:#x}")
                }
                (None, Some(why)) => {
                    assert!(["needs root", "page not mapped in yet"].contains(&why), "{r}");
                    format!("unreadable ({why})")
                }
                _ => panic!("a physical address or why not: {r}"),
            };
            let kib = align / 1024;
            let line = format!(
                " MR {name}: addr {addr:#x}, page offset {off}, aligned {}, huge pages no, phys {phys}\n",
                if align >= 1 << 20 {
                    format!("{} MiB", align >> 20)
                } else {
                    format!("{kib} KiB")
                }
            );
            let head = &out[..out.find("#bytes").unwrap_or(out.len())];
            assert!(head.contains(&line), "{line:?} in the header:\n{out}");
        }
    }
    let (code, _, err) = rdmaprobe(&["plot", json.to_str().unwrap(), "--out", plots.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let page = std::fs::read_to_string(plots.join("report.html")).unwrap();
    assert!(
        page.contains("<h2>Memory regions</h2>") && page.contains("id=\"regions\""),
        "{page}"
    );
    assert!(
        page.contains(&format!("<td class=\"l\">{}.A</td>", backends[0])),
        "{page}"
    );
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_dir_all(&plots);
}
