//! Classic libpcap format (magic a1b2c3d4 µs / a1b23c4d ns, either byte order).
