"""The control words of a rank's shared-memory segment: where each one is.

Owns: the layout, as int64 word indexes (and the byte offsets of the detail words). Shared
by ``shm`` (segments, waits) and ``shm_exposed`` (single-copy reads and writes), and read by
the compiled rounds above (``group.one_round``). Must not know anything else.

Layout of one rank's segment (little-endian int64 control words, one cache line each)::

    0     READY      last round whose data is in my slot
    8     FP[2]      fingerprint hash of the round in slot 0 / slot 1 (READY's cache line: a
                     peer that sees READY has the hash in the same line)
    24    SEQ[2]     the call number of the round in slot 0 / slot 1 (the same line)
    64    REDUCED    last round whose reduced slice is in my slot (two-shot)
    128   DONE       last round I finished reading the others' slots
    192   CPU        the CPU this rank was on when it last waited, and the round then
                     (round << 16 | cpu + 1): a waiter whose peer shares its CPU moves
    256   DETAIL[2]  the fingerprints themselves (word 0 unused, then 7 words), for error
                     messages; rewritten only when the fingerprint changes
    384   EXPOSED[2] the address of this rank's buffer for the round, in its own process
    448   SELF       this segment's address and pid in its owner, and a magic (CMA probe)
    1024  LIST[2]    up to 96 (address, byte size) pairs of exposed blocks, by parity
    4096  slot 0, slot 1 (slot_bytes each)
"""

READY, REDUCED, DONE = 0, 8, 16  # int64 indexes of the control words
FP, SEQ = 1, 3  # [2] each, by parity, on READY's cache line
DETAIL = 32
CPU = 24  # round << 16 | cpu + 1, posted by a rank that starts a slow wait
CPU_BITS = 16
EXPOSED = 48  # [2]: where this rank's user buffer of the round is, in its own process (CMA)
LIST = 128  # [2][2][LIST_MAX]: addresses then sizes of several exposed blocks, by parity
LIST_MAX = 96
SELF = 56  # address of this segment in its owner, the owner's pid, a magic: for the CMA probe
MAGIC = 0x616363_6F72_6443  # any fixed value: what the probe expects to read back
DETAIL_OFFSET = (DETAIL * 8, (DETAIL + 8) * 8)  # byte offset of the detail words, by parity
CONTROL_BYTES = 4096
