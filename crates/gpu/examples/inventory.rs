//! Prints what gpuhub sees of this host's GPUs, as JSON: the inventory [`gpuhub_gpu::detect`] picks
//! (NVML, or an empty configured list) and one usage sample. An admin's check that NVML works before
//! `gpuhub serve`: `cargo run -p gpuhub-gpu --example inventory`.

fn main() {
    let (inventory, source) = gpuhub_gpu::detect(Vec::new());
    let gpus = inventory.gpus();
    let sample = inventory.sample();
    let out = serde_json::json!({
        "source": source,
        "gpus": gpus.as_ref().map_err(ToString::to_string),
        "sample": sample.as_ref().map_err(ToString::to_string),
        "host": gpuhub_gpu::hostname().map_err(|e| e.to_string()),
    });
    println!("{}", serde_json::to_string_pretty(&out).expect("json"));
}
