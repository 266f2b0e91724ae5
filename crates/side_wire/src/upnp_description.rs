//! A UPnP device description and SOAP answers, read by a streaming parser with a bound
//! on nesting: no tree is built, and a document nested a hundred thousand deep is
//! refused, not recursed into.

use xml::reader::{EventReader, ParserConfig, XmlEvent};

/// Deepest XML nesting taken (a description nests about 8 deep).
pub const XML_DEPTH_MAX: usize = 32;
/// The services that map ports.
pub const SERVICES: [&str; 3] = [
    "urn:schemas-upnp-org:service:WANIPConnection:1",
    "urn:schemas-upnp-org:service:WANIPConnection:2",
    "urn:schemas-upnp-org:service:WANPPPConnection:1",
];

/// Walk `xml` as a stream, at most [`XML_DEPTH_MAX`] deep, calling `on` with each
/// element's path of local names and its text.
fn walk_xml(xml: &str, mut on: impl FnMut(&[String], &str)) -> Result<(), String> {
    let config = ParserConfig::new().trim_whitespace(true).ignore_comments(true);
    let mut path: Vec<String> = Vec::new();
    for event in EventReader::new_with_config(xml.as_bytes(), config) {
        match event.map_err(|e| format!("XML: {e}"))? {
            XmlEvent::StartElement { name, .. } => {
                if path.len() >= XML_DEPTH_MAX {
                    return Err(format!("XML nested more than {XML_DEPTH_MAX} deep"));
                }
                path.push(name.local_name);
            }
            XmlEvent::EndElement { .. } => {
                path.pop();
            }
            XmlEvent::Characters(text) | XmlEvent::CData(text) => on(&path, &text),
            _ => {}
        }
    }
    Ok(())
}

/// The control URL and type of the first port-mapping service a description lists.
pub fn control_url(description: &str) -> Result<(String, String), String> {
    let (mut kind, mut control) = (String::new(), String::new());
    let mut found = None;
    walk_xml(description, |path, text| {
        if found.is_some() || path.len() < 2 || path[path.len() - 2] != "service" {
            return;
        }
        match path[path.len() - 1].as_str() {
            "serviceType" => (kind, control) = (text.to_string(), String::new()),
            "controlURL" => control = text.to_string(),
            _ => {}
        }
        if SERVICES.contains(&kind.as_str()) && !control.is_empty() {
            found = Some((control.clone(), kind.clone()));
        }
    })?;
    found.ok_or_else(|| "the gateway's description lists no port-mapping service".into())
}

/// The text of the first element called `name` in `xml`.
pub fn element_text(xml: &str, name: &str) -> Result<Option<String>, String> {
    let mut found = None;
    walk_xml(xml, |path, text| {
        if found.is_none() && path.last().is_some_and(|n| n == name) {
            found = Some(text.to_string());
        }
    })?;
    Ok(found)
}
