//! PNG copies of the plots: each figure's SVG (drawn by plotters, see [`super::plot`]) rasterised
//! with resvg, so the PNG shows exactly what the SVG shows. Text needs a font: the system's fonts
//! are searched once (fontdb) and the plots' `sans-serif` is mapped to the first of a few common
//! sans-serif families that is installed (Debian: `fonts-dejavu-core`). Without any font a PNG
//! would have axes without numbers, so none is written and the caller says why.

use resvg::tiny_skia::{Pixmap, Transform};
use resvg::usvg::{fontdb, Options, Tree};
use std::sync::{Arc, OnceLock};

/// Sans-serif families tried in this order for the plots' `sans-serif`.
const SANS: [&str; 6] = [
    "DejaVu Sans",
    "Liberation Sans",
    "Noto Sans",
    "FreeSans",
    "Arial",
    "Helvetica",
];

/// Why a PNG could not be made.
#[derive(Debug, thiserror::Error)]
pub enum PngError {
    /// The machine has no font the plots' text can be drawn with.
    #[error("no font found for the plots' text (install a sans-serif font, e.g. Debian's fonts-dejavu-core); PNG copies not written")]
    NoFont,
    /// The SVG could not be read back (a bug in the plot code).
    #[error("rasterising {file}: {why}")]
    Svg {
        /// Figure file name.
        file: String,
        /// resvg's message.
        why: String,
    },
    /// The PNG encoder failed.
    #[error("encoding {file} as PNG: {why}")]
    Encode {
        /// Figure file name.
        file: String,
        /// The encoder's message.
        why: String,
    },
}

/// The system's fonts, loaded once, with `sans-serif` mapped to an installed family; `None` if
/// there is no usable font.
fn fonts() -> Option<Arc<fontdb::Database>> {
    static DB: OnceLock<Option<Arc<fontdb::Database>>> = OnceLock::new();
    DB.get_or_init(|| {
        let mut db = fontdb::Database::new();
        db.load_system_fonts();
        let has = |name: &str| db.faces().any(|f| f.families.iter().any(|(n, _)| n == name));
        let family = SANS.iter().find(|f| has(f)).map(|f| f.to_string()).or_else(|| {
            // any installed face at all, rather than no text
            db.faces()
                .next()
                .and_then(|f| f.families.first())
                .map(|(n, _)| n.clone())
        })?;
        db.set_sans_serif_family(family);
        Some(Arc::new(db))
    })
    .clone()
}

/// The family the plots' text is drawn with, if there is one (for the report's notes).
pub fn text_family() -> Option<String> {
    let db = fonts()?;
    let id = db.query(&fontdb::Query {
        families: &[fontdb::Family::SansSerif],
        ..Default::default()
    })?;
    db.face(id).and_then(|f| f.families.first()).map(|(n, _)| n.clone())
}

/// Rasterises one figure's SVG (`file` names it in errors) at its own size.
pub fn render(file: &str, svg: &str) -> Result<Vec<u8>, PngError> {
    let db = fonts().ok_or(PngError::NoFont)?;
    let opt = Options {
        fontdb: db,
        font_family: "sans-serif".into(),
        ..Default::default()
    };
    let tree = Tree::from_str(svg, &opt).map_err(|e| PngError::Svg {
        file: file.into(),
        why: e.to_string(),
    })?;
    let size = tree.size().to_int_size();
    let mut pixmap = Pixmap::new(size.width(), size.height()).ok_or_else(|| PngError::Svg {
        file: file.into(),
        why: format!("empty size {}x{}", size.width(), size.height()),
    })?;
    resvg::render(&tree, Transform::identity(), &mut pixmap.as_mut());
    pixmap.encode_png().map_err(|e| PngError::Encode {
        file: file.into(),
        why: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A known SVG comes out with its size, its background and its line in the right colours
    /// and places (and the text in dark pixels where a font exists).
    #[test]
    fn an_svg_is_rasterised_with_its_colours_and_text() {
        let svg = r##"<svg xmlns="http://www.w3.org/2000/svg" width="200" height="100">
            <rect x="0" y="0" width="200" height="100" fill="#FFFFFF"/>
            <line x1="0" y1="80" x2="200" y2="80" stroke="#0072B2" stroke-width="4"/>
            <text x="10" y="40" font-family="sans-serif" font-size="24" fill="#000000">p50 ns</text>
            </svg>"##;
        let png = match render("t.svg", svg) {
            Ok(p) => p,
            Err(PngError::NoFont) => panic!("no font on this machine: harness/setup.sh installs fonts-dejavu-core"),
            Err(e) => panic!("{e}"),
        };
        let pm = Pixmap::decode_png(&png).unwrap();
        assert_eq!((pm.width(), pm.height()), (200, 100));
        let px = |x: u32, y: u32| {
            let c = pm.pixel(x, y).unwrap();
            (c.red(), c.green(), c.blue())
        };
        assert_eq!(px(100, 5), (255, 255, 255), "background");
        assert_eq!(px(100, 80), (0, 114, 178), "the line");
        // the text: dark pixels in its box, none in the same box further right
        let dark = |x0: u32, x1: u32| {
            (x0..x1)
                .flat_map(|x| (15..45).map(move |y| (x, y)))
                .filter(|&(x, y)| px(x, y).0 < 100)
                .count()
        };
        assert!(dark(10, 90) > 50, "no text drawn: {} dark pixels", dark(10, 90));
        assert_eq!(dark(150, 200), 0);
    }

    #[test]
    fn a_broken_svg_is_an_error_naming_the_file() {
        let e = render("lat-x.svg", "<svg").unwrap_err();
        assert!(e.to_string().contains("lat-x.svg"), "{e}");
    }
}
