peregrine bench router --rounds 1 --trial 1s --dut-on-sender-cpu --name bench-router-sender-cpu --out docs/results
