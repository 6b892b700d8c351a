peregrine bench gen --duration 3 --size imix --flows 100 --name bench-gen-imix-100flows --out docs/results
