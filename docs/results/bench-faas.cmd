peregrine bench faas --sizes 200,800,1400 --configs socket:1,mmsg:1,afxdp:1 --out docs/results
