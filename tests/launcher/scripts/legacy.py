"""For the legacy launcher: parse --local-rank as torch.distributed.launch scripts do."""

import argparse
import os

parser = argparse.ArgumentParser()
parser.add_argument("--local-rank", "--local_rank", type=int, default=None)
parser.add_argument("rest", nargs="*")
args = parser.parse_args()
print(f"LEGACY local_rank_arg={args.local_rank} env={os.environ['LOCAL_RANK']} rest={args.rest}")
