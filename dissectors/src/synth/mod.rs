//! Capture synthesizer: emits the published S2D experiments (and variants with mirror-port
//! duplication, retransmission and reordering) as pcap files, through the `wire` emitters.
