./target/release/peregrine bench netmodes --ipv6 --scenarios II,III --rates 200Mbit,unpaced --sizes 64,128,256,512,1024,1452 --count 200k --repeats 2 --out docs/results --name bench-netmodes-ipv6
