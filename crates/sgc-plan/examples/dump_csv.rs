// temporary: dump plan lifetimes as minimalloc CSV
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let g = sgc_ir::load_any(&args[1]).unwrap();
    let strategy = if args[2] == "none" { sgc_plan::Strategy::None } else { sgc_plan::Strategy::Sublinear };
    let o = sgc_plan::PlanOptions { strategy, arena: false, ..Default::default() };
    let p = sgc_plan::plan(&g, &o, &Default::default()).unwrap();
    println!("id,lower,upper,size");
    for (i, l) in p.lifetimes.iter().enumerate() {
        println!("{i},{},{},{}", l.first_step, l.last_step + 1, l.bytes);
    }
}
