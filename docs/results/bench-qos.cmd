./target/release/peregrine bench qos --rounds 3 --name bench-qos --out docs/results   # 2026-11-24 00:44-00:52 UTC (defaults: --rates 10Mbit,100Mbit,1Gbit --trial 4s --tcp-time 10s --rules 100000)
