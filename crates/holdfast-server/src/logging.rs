//! Log output for `serve`: human lines (coloured on a terminal) or one JSON
//! object per line. `RUST_LOG` filters as usual; the default is `info` for
//! holdfast and `warn` for the libraries.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::settings::LogFormat;

pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("warn,holdfast=info,holdfast_server=info,tower_http=info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // try_init: a second call (tests) keeps the first subscriber.
    let _ = match format {
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).try_init(),
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).try_init(),
    };
}
