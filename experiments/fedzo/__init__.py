"""FedZO (seed 001) analysis: the per-round cost of partial participation and AirComp noise."""
