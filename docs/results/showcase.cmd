peregrine showcase --out docs/results
