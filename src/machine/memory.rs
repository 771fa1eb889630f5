//! The RAM available now (Linux: `MemAvailable` of /proc/meminfo; Windows:
//! `GlobalMemoryStatusEx`).

#[cfg(target_os = "linux")]
pub fn ram_available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_available(&meminfo)
}

#[cfg(windows)]
#[allow(unsafe_code)]
pub fn ram_available_bytes() -> Option<u64> {
    use windows_sys::Win32::System::SystemInformation::{GlobalMemoryStatusEx, MEMORYSTATUSEX};
    let mut status = MEMORYSTATUSEX {
        dwLength: std::mem::size_of::<MEMORYSTATUSEX>() as u32,
        ..unsafe { std::mem::zeroed() }
    };
    // SAFETY: a MEMORYSTATUSEX with its dwLength set, as the call requires
    let ok = unsafe { GlobalMemoryStatusEx(&mut status) };
    (ok != 0).then_some(status.ullAvailPhys)
}

#[cfg(not(any(target_os = "linux", windows)))]
pub fn ram_available_bytes() -> Option<u64> {
    None
}

/// `MemAvailable: 12345 kB` of /proc/meminfo, in bytes.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn meminfo_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn available_memory_is_read_from_meminfo_in_bytes() {
        let meminfo =
            "MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(meminfo_available(meminfo), Some(20_480_000_000));
        assert_eq!(meminfo_available("MemTotal: 1 kB\n"), None);
    }
}
