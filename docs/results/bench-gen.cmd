peregrine bench gen --duration 3 --out docs/results
