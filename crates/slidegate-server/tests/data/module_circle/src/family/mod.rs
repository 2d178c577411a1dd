mod child;

pub use child::Child;

pub trait Parent {}
