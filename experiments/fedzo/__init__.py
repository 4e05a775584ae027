"""FedZO (Fang et al. 2022) analysis: the per-round cost of partial participation and AirComp noise."""
