peregrine bench gen --duration 3 --ipv6 --name bench-gen-ipv6-78 --out docs/results
