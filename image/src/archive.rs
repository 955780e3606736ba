//! The `oci-archive` of a layout: the layout directory as an uncompressed tar (what
//! `skopeo copy oci-archive:<file>` reads), made like a layer's tar (sorted, 0:0, one time), so
//! the same layout gives the same archive bytes.

use std::fs::File;
use std::path::Path;

use crate::layer::regular_files;
use crate::{ImageError, io};

/// Packs the layout at `layout` into the tar file `archive`.
pub fn write_archive(layout: &Path, archive: &Path, epoch: u64) -> Result<(), ImageError> {
    let tmp = archive.with_extension("tmp");
    let file = File::create(&tmp).map_err(io(&tmp))?;
    let mut tar = tar::Builder::new(file);
    tar.mode(tar::HeaderMode::Deterministic);
    for (rel, path, len) in regular_files(layout)? {
        let mut h = tar::Header::new_gnu();
        let f = File::open(&path).map_err(io(&path))?;
        h.set_size(len);
        h.set_mode(0o644);
        h.set_mtime(epoch);
        h.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut h, &rel, f).map_err(io(&path))?;
    }
    tar.into_inner()
        .and_then(|f| f.sync_all())
        .map_err(io(&tmp))?;
    std::fs::rename(&tmp, archive).map_err(io(archive))
}
