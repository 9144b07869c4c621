//! pcapng: SHB, IDB (per-interface link type and if_tsresol), EPB, SPB, OPB; other blocks skipped.
