peregrine bench router --rounds 2 --trial 1s --out docs/results
