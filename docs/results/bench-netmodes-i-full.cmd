./target/release/peregrine bench netmodes --scenarios I --counts 2M,10M --paths udp,mmsg,mmap,afxdp --repeats 1 --max-run 120s --out docs/results --name bench-netmodes-i-full
