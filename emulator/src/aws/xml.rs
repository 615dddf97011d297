//! Answers in the Query protocol's XML: an operation's result as a tree of elements (built by the operation,
//! written here with quick-xml, which escapes the text), and the error document, each in its API's dialect
//! (`api::Style`).

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use quick_xml::Writer;
use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};

use super::api::Style;
use super::error::AwsError;
use crate::call::ErrorCode;

/// The header AWS's SDKs read the request ID from.
pub const REQUEST_ID_HEADER: &str = "x-amzn-RequestId";

/// An element: text, or elements in order (an empty list is an empty element, as EC2 writes an empty set).
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Text(&'static str, String),
    Elements(&'static str, Vec<Node>),
}

/// `<name>value</name>`.
pub fn text(name: &'static str, value: impl Into<String>) -> Node {
    Node::Text(name, value.into())
}

/// `<name>` holding `children`.
pub fn el(name: &'static str, children: Vec<Node>) -> Node {
    Node::Elements(name, children)
}

/// A list as EC2 writes one: `<name><item>…</item>…</name>`.
pub fn items(name: &'static str, each: impl IntoIterator<Item = Vec<Node>>) -> Node {
    el(name, each.into_iter().map(|children| el("item", children)).collect())
}

/// A list as the other Query APIs write one: `<name><member>…</member>…</name>`.
pub fn members(name: &'static str, each: impl IntoIterator<Item = Vec<Node>>) -> Node {
    el(name, each.into_iter().map(|children| el("member", children)).collect())
}

/// An operation's answer in `style`'s dialect: EC2's `<{action}Response xmlns=…><requestId>…</requestId>{body}
/// </{action}Response>`, or the others' `<{action}Response xmlns=…><{action}Result>{body}</{action}Result>
/// <ResponseMetadata><RequestId>…</RequestId></ResponseMetadata></{action}Response>`.
pub fn response(
    style: Style,
    xmlns: &str,
    action: &str,
    request_id: &str,
    body: Vec<Node>,
) -> Result<Response, AwsError> {
    let root = format!("{action}Response");
    let mut w = Writer::new(Vec::new());
    let written = (|| -> std::io::Result<()> {
        w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
        w.write_event(Event::Start(BytesStart::new(root.as_str()).with_attributes([("xmlns", xmlns)])))?;
        match style {
            Style::Ec2 => {
                write(&mut w, &text("requestId", request_id))?;
                for node in &body {
                    write(&mut w, node)?;
                }
            }
            Style::Query => {
                let result = format!("{action}Result");
                w.write_event(Event::Start(BytesStart::new(result.as_str())))?;
                for node in &body {
                    write(&mut w, node)?;
                }
                w.write_event(Event::End(BytesEnd::new(result.as_str())))?;
                write(&mut w, &el("ResponseMetadata", vec![text("RequestId", request_id)]))?;
            }
        }
        w.write_event(Event::End(BytesEnd::new(root.as_str())))
    })();
    written.map_err(|e| AwsError::internal(format!("cannot write the answer: {e}")))?;
    Ok(answer(axum::http::StatusCode::OK, request_id, w.into_inner()))
}

/// An error in `style`'s shape: EC2's `<Response><Errors><Error><Code/><Message/></Error></Errors><RequestID/>
/// </Response>`, or the others' `<ErrorResponse><Error><Type/><Code/><Message/></Error><RequestId/></ErrorResponse>`
/// (botocore's `QueryParser` and aws-sdk-go-v2's `awsquery` read the code from either).
pub fn error(style: Style, e: &AwsError, request_id: &str) -> Response {
    let code = text("Code", e.code.to_string());
    let message = text("Message", e.message.clone());
    let doc = match style {
        Style::Ec2 => {
            el("Response", vec![el("Errors", vec![el("Error", vec![code, message])]), text("RequestID", request_id)])
        }
        Style::Query => {
            // Whose fault: the caller's for a 4xx, the service's for the rest.
            let kind = if e.status.is_client_error() { "Sender" } else { "Receiver" };
            el(
                "ErrorResponse",
                vec![el("Error", vec![text("Type", kind), code, message]), text("RequestId", request_id)],
            )
        }
    };
    let mut w = Writer::new(Vec::new());
    let body =
        match w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None))).and_then(|()| write(&mut w, &doc))
        {
            Ok(()) => w.into_inner(),
            // Writing to memory does not fail; were it to, the status and code still say what happened.
            Err(_) => Vec::new(),
        };
    let mut resp = answer(e.status, request_id, body);
    resp.extensions_mut().insert(ErrorCode(e.code.to_string()));
    resp
}

fn answer(status: axum::http::StatusCode, request_id: &str, body: Vec<u8>) -> Response {
    let mut resp = (status, [(header::CONTENT_TYPE, "text/xml;charset=UTF-8")], body).into_response();
    if let Ok(v) = HeaderValue::from_str(request_id) {
        resp.headers_mut().insert(REQUEST_ID_HEADER, v);
    }
    resp
}

fn write(w: &mut Writer<Vec<u8>>, node: &Node) -> std::io::Result<()> {
    match node {
        Node::Text(name, value) => {
            w.create_element(*name).write_text_content(BytesText::new(value))?;
        }
        Node::Elements(name, children) if children.is_empty() => {
            w.create_element(*name).write_empty()?;
        }
        Node::Elements(name, children) => {
            w.write_event(Event::Start(BytesStart::new(*name)))?;
            for child in children {
                write(w, child)?;
            }
            w.write_event(Event::End(BytesEnd::new(*name)))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    async fn body(resp: Response) -> String {
        String::from_utf8(axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap().to_vec()).unwrap()
    }

    #[tokio::test]
    async fn answers_and_errors_are_ec2s_xml_with_the_text_escaped() {
        let tags = items("tagSet", [vec![text("key", "a<b"), text("value", "x&y")]]);
        let resp =
            response(Style::Ec2, "http://ec2.amazonaws.com/doc/2016-11-15/", "DescribeThings", "rid", vec![tags])
                .unwrap();
        assert_eq!(resp.headers()[REQUEST_ID_HEADER], "rid");
        assert_eq!(
            body(resp).await,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><DescribeThingsResponse xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\">\
             <requestId>rid</requestId><tagSet><item><key>a&lt;b</key><value>x&amp;y</value></item></tagSet>\
             </DescribeThingsResponse>"
        );
        let e = AwsError::client("InvalidAction", "no such action");
        let resp = error(Style::Ec2, &e, "rid");
        assert_eq!(resp.status(), 400);
        assert_eq!(resp.extensions().get::<ErrorCode>().unwrap().0, "InvalidAction");
        assert_eq!(
            body(resp).await,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Errors><Error><Code>InvalidAction</Code>\
             <Message>no such action</Message></Error></Errors><RequestID>rid</RequestID></Response>"
        );
    }

    #[tokio::test]
    async fn the_other_query_apis_wrap_their_result_and_say_whose_fault_an_error_is() {
        let names = members("Names", [vec![text("Name", "a")]]);
        let resp = response(Style::Query, "urn:x", "DescribeThings", "rid", vec![names]).unwrap();
        assert_eq!(
            body(resp).await,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><DescribeThingsResponse xmlns=\"urn:x\"><DescribeThingsResult>\
             <Names><member><Name>a</Name></member></Names></DescribeThingsResult>\
             <ResponseMetadata><RequestId>rid</RequestId></ResponseMetadata></DescribeThingsResponse>"
        );
        for (e, kind) in
            [(AwsError::client("Throttling", "slow down"), "Sender"), (AwsError::internal("a bug"), "Receiver")]
        {
            let resp = error(Style::Query, &e, "rid");
            assert_eq!(
                body(resp).await,
                format!(
                    "<?xml version=\"1.0\" encoding=\"UTF-8\"?><ErrorResponse><Error><Type>{kind}</Type>\
                     <Code>{}</Code><Message>{}</Message></Error><RequestId>rid</RequestId></ErrorResponse>",
                    e.code, e.message
                )
            );
        }
    }
}
