./target/release/peregrine bench netmodes --counts 200k,500k,1M --count 200k --repeats 2 --out docs/results
